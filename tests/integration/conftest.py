"""Real ANS servers on loopback ports, started as ``ans serve`` subprocesses."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ans.governance.keys import SigningKey

START_TIMEOUT = 90.0


@dataclass
class RunningServer:
    url: str
    data_dir: Path
    proc: subprocess.Popen[str]
    output: list[str]


def start_server(data_dir: Path, *extra: str) -> RunningServer:
    ans = Path(sys.executable).with_name("ans")
    cmd = [str(ans), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir), *extra]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
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
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        if line.startswith("ANS listening on "):
            return RunningServer(line.split()[-1], data_dir, proc, output)
    proc.kill()
    raise RuntimeError("ANS did not start:\n" + "".join(output[-40:]))


def stop_server(server: RunningServer) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait(timeout=5)


@pytest.fixture(scope="session")
def test_gov_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[SigningKey, Path]:
    """A governance platform of our own: its key signs manifests the server trusts."""
    import json

    d = tmp_path_factory.mktemp("gov")
    key = SigningKey.generate()
    jwks = d / "governance.jwks.json"
    jwks.write_text(json.dumps({"keys": [key.public.jwk()]}))
    return key, jwks


@pytest.fixture(scope="session")
def server(
    tmp_path_factory: pytest.TempPathFactory, test_gov_key: tuple[SigningKey, Path]
) -> Iterator[RunningServer]:
    data = tmp_path_factory.mktemp("ans-data")
    srv = start_server(data, "--demo", "--governance-jwks", str(test_gov_key[1]))
    yield srv
    stop_server(srv)


@pytest.fixture
def server_factory() -> Iterator[Any]:
    """start(data_dir, *args) -> RunningServer; every server is stopped afterwards."""
    started: list[RunningServer] = []

    def start(data_dir: Path, *extra: str) -> RunningServer:
        srv = start_server(data_dir, *extra)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        stop_server(srv)
