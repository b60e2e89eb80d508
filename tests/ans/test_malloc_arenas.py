"""``ans serve`` caps glibc's malloc arenas (ans.malloc_arenas): eight threads
allocating at once get an arena each by default, and share at most two once
capped. Counted with glibc's own ``malloc_info`` in a fresh process."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import sys

import pytest

from ans.malloc_arenas import limit_arenas

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
