"""``ans peers check`` against real ``ans serve`` processes on loopback: a peer
that works over HTTP/2 and over the native framing, a down one, one pinned to
the wrong key, one that refuses the probe's scope, and the configuration
errors."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import orjson
import pytest
from ans.federation.check import DEFAULT_INTENT
from ans.governance.keys import SigningKey

from ans.cli import main
from ans.client import AgtpClient
from tools.launcher import RunningServer


@pytest.fixture
def peer(demo: RunningServer) -> RunningServer:
    """The peer: ``ans serve --demo`` with the native listener too (conftest)."""
    return demo


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def rows(out: str) -> dict[str, list[str]]:
    """The table's rows by peer URL."""
    lines = out.splitlines()
    assert lines[0].split() == ["peer", "tier", "key", "status", "ms", "results"]
    table = {}
    for line in lines[1:-1]:
        cells = line.split()
        table[cells[0]] = cells[1:]
    return table


def test_a_working_peer_passes_over_both_transports(
    peer: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert peer.native_url is not None
    kid = httpx.get(f"{peer.url}/.well-known/jwks.json").json()["keys"][0]["kid"]
    code = main(
        [
            "peers",
            "check",
            "--peer",
            f"2@{peer.url}",
            "--peer",
            f"1@{peer.native_url}",
            "--intent",
            "audit Solidity smart contracts for reentrancy",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, (out, err)
    table = rows(out)
    for url, tier in ((peer.url, "2"), (peer.native_url, "1")):
        tier_cell, key, status, _ms, results = table[url]
        assert (tier_cell, status, results) == (tier, "ok", "1")
        assert kid.startswith(key.rstrip("…"))  # the key the peer publishes
    assert out.splitlines()[-1] == "2 of 2 peers answered and verified"
    assert err == ""


def test_down_and_wrongly_pinned_peers_fail_with_the_warning_a_caller_would_see(
    peer: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    # A zone-restricted peer is asked about its zone: the probe's best answer
    # without one lies elsewhere, and an entry from another zone would fail it.
    with AgtpClient(
        peer.url, agent_id="agtp://t.example/agents/t", principal_id="t", scope="discovery:query"
    ) as client:
        top = client.discover({"intent": DEFAULT_INTENT, "limit": 1}).result["results"][0]
    zone = "zone:legal" if top["governance_zone"] != "zone:legal" else "zone:finance"
    wrong = tmp_path / "wrong.jwks.json"
    other = SigningKey.generate()
    wrong.write_bytes(orjson.dumps({"keys": [other.public.jwk()]}))
    config = tmp_path / "ans.toml"
    config.write_text(
        "[federation]\npeer_timeout = 1.0\ndeadline = 1.5\n"
        f'[[federation.peers]]\nurl = "{peer.url}"\ntier = 2\njwks_file = "{wrong}"\n'
        f'[[federation.peers]]\nurl = "{dead}"\ntier = 2\n'
        f'[[federation.peers]]\nurl = "{peer.native_url}"\ntier = 3\nzones = ["{zone}"]\n'
    )
    code = main(["peers", "check", "--config", str(config)])
    out, err = capsys.readouterr()
    assert code == 1
    table = rows(out)
    assert table[peer.url][1:3] == [f"{other.kid[:12]}…", "FAIL"]
    assert table[peer.url][3] == "peer_signature_invalid"
    assert table[dead][1:4] == ["-", "FAIL", "peer_key_unavailable"]
    assert table[str(peer.native_url)][2] == "ok"  # asked about a zone it is accepted for
    assert out.splitlines()[-1] == "1 of 3 peers answered and verified"
    problems = err.splitlines()
    assert len(problems) == 2
    assert problems[0].startswith(f"peer_signature_invalid: peer {peer.url}: ")
    assert problems[1].startswith(f"peer_key_unavailable: peer {dead}: ")


def test_json_output_for_scripts(peer: RunningServer, capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    code = main(["peers", "check", "--peer", f"2@{peer.url}", "--peer", f"3@{dead}", "--json"])
    out, err = capsys.readouterr()
    assert code == 1 and err == ""
    kid = httpx.get(f"{peer.url}/.well-known/jwks.json").json()["keys"][0]["kid"]
    good, down = orjson.loads(out)
    assert {k: good[k] for k in ("url", "tier", "ok", "key_ids", "results", "code")} == {
        "url": peer.url,
        "tier": 2,
        "ok": True,
        "key_ids": [kid],
        "results": 1,
        "code": None,
    }
    assert (down["url"], down["ok"], down["key_ids"], down["code"]) == (
        dead,
        False,
        [],
        "peer_key_unavailable",
    )
    assert down["message"].startswith(f"peer {dead}: ")


def test_a_peer_refusing_the_probes_scope_fails(
    peer: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["peers", "check", "--peer", f"2@{peer.url}", "--scope", "agents:delegate"])
    out, err = capsys.readouterr()
    assert code == 1
    assert rows(out)[peer.url][2:4] == ["FAIL", "peer_error"]
    assert "451 scope_violation" in err


def test_nothing_to_check_or_a_bad_peer_flag_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["peers", "check"]) == 2
    assert "no peers configured" in capsys.readouterr().err
    assert main(["peers", "check", "--peer", "9@http://127.0.0.1:1"]) == 2
    assert "configuration error" in capsys.readouterr().err
