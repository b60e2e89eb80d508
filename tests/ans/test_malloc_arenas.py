"""``ans serve``'s glibc malloc settings (ans.malloc_arenas): eight threads
allocating at once get an arena each by default, and share at most two once
capped (counted with glibc's own ``malloc_info`` in a fresh process); a
query's large blocks, freed, stay in the heap for the next one (counted in
page faults)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import sys

import pytest

from ans.malloc_arenas import keep_large_blocks, limit_arenas

SCRIPT = r"""
import ctypes, ctypes.util, os, sys, tempfile, threading
from ans.malloc_arenas import limit_arenas

if sys.argv[1] == "limit":
    assert limit_arenas(2)
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.fopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
together = threading.Barrier(8)

def work():
    together.wait()  # all eight allocate while the others are alive
    held = [libc.malloc(1 << 14) for _ in range(64)]
    together.wait()
    for p in held:
        libc.free(p)

threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
path = os.path.join(tempfile.mkdtemp(), "info.xml")
fp = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, fp)
libc.fclose(fp)
print(open(path).read().count("<heap nr="))
"""


def _arenas(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.strip())


def _glibc() -> bool:
    try:
        return hasattr(ctypes.CDLL(ctypes.util.find_library("c")), "malloc_info")
    except OSError:
        return False


@pytest.mark.skipif(not _glibc(), reason="malloc arenas are glibc's; this libc has none to count")
def test_threads_share_at_most_two_arenas_once_capped() -> None:
    assert _arenas("default") > 2  # the count sees each thread's own arena
    assert _arenas("limit") <= 2


def test_the_environment_and_nonsense_leave_glibc_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    assert limit_arenas(0) is False
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_arenas(2) is False  # glibc already read the operator's value


FAULTS = r"""
import ctypes, ctypes.util, resource, sys
from ans.malloc_arenas import keep_large_blocks

if sys.argv[1] == "keep":
    assert keep_large_blocks()
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
SIZE = 8 << 20  # a million float64s: one query text's BM25 sums at 1M agents

def query():
    blocks = [libc.malloc(SIZE) for _ in range(4)]
    for b in blocks:
        libc.memset(b, 1, SIZE)  # written, as a DISCOVER writes its arrays
    for b in blocks:
        libc.free(b)

for _ in range(3):
    query()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    query()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.strip())


@pytest.mark.skipif(not _glibc(), reason="mmap and trim thresholds are glibc's")
def test_a_querys_large_blocks_stay_in_the_heap_for_the_next_one() -> None:
    # glibc's defaults give the freed 32 MB back to the kernel after each
    # "query" and fault it in again on the next: thousands of page faults
    default, kept = _faults("default"), _faults("keep")
    assert default > 20 * 2048  # at least one 8 MB block's pages again per query
    assert kept * 20 < default


def test_the_environments_thresholds_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "1048576")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1048576")
    assert keep_large_blocks() is False  # glibc already read the operator's values
