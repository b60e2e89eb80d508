"""Run ``ans serve`` as a subprocess on a loopback port and wait for its
"ANS listening on URL" line (and, with ``--native-listen``, the native
listener's URL printed before it); read a process's CPU time. Used by the
integration tests and the benchmarks."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT = 90.0


@dataclass
class RunningServer:
    url: str
    data_dir: Path
    proc: subprocess.Popen[str]
    output: list[str]
    native_url: str | None = None


def start_server(
    data_dir: Path, *extra: str, wrapper: Sequence[str] = ()
) -> RunningServer:
    """``wrapper``: a command that runs ``ans serve`` (e.g. in a mount
    namespace with the data directory on a small file system). One process
    (``--workers 1``) unless ``extra`` says ``--workers``: the tests that look
    at one process's state (its audit log, its limits) stay exact."""
    if "--workers" not in extra:
        extra = (*extra, "--workers", "1")
    ans = Path(sys.executable).with_name("ans")
    cmd = [
        *wrapper,
        str(ans),
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(data_dir),
        *extra,
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # each server its own metrics (a multiprocess directory is ans serve's to set)
        env={
            **{k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"},
            "PYTHONUNBUFFERED": "1",
        },
    )
    lines: queue.Queue[str] = queue.Queue()
    output: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT
    native_url = None
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        if line.startswith("ANS native AGTP listening on "):
            native_url = line.split()[-1]
        if line.startswith("ANS listening on "):
            return RunningServer(line.split()[-1], data_dir, proc, output, native_url)
    proc.kill()
    raise RuntimeError("ANS did not start:\n" + "".join(output[-40:]))


def stop_server(server: RunningServer) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait(timeout=5)


def cpu_ms(pid: int) -> float | None:
    """User + system CPU time of a process (Linux /proc), in ms; None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")
