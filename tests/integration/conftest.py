"""Real ANS servers on loopback ports, started as ``ans serve`` subprocesses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ans.governance.keys import SigningKey

from tools.launcher import RunningServer, start_server, stop_server

__all__ = ["RunningServer", "start_server", "stop_server"]


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
    # The functional tests send many requests from one Agent-ID (60 concurrent
    # DISCOVERs, ...): no rate limit here; test_integration_auth tests it.
    cfg = tmp_path_factory.mktemp("ans-config") / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n")
    srv = start_server(
        data, "--demo", "--governance-jwks", str(test_gov_key[1]), "--config", str(cfg)
    )
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """``ans serve --demo`` (64 agents) with the native listener too, no rate
    limit; one per test module."""
    cfg = tmp_path_factory.mktemp("native-config") / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n")
    srv = start_server(
        tmp_path_factory.mktemp("native-data"),
        "--demo",
        "--native-listen",
        "127.0.0.1:0",
        "--config",
        str(cfg),
    )
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
