"""ans backup while serving, ans restore into a new data directory, and the
restored server gives the same signed answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ans.client import AgtpClient, verify_discover_result
from tools.launcher import start_server, stop_server

ROOT = Path(__file__).resolve().parents[2]
ANS = str(Path(sys.executable).with_name("ans"))
INTENTS = (
    "read a scanned receipt and return the merchant, date and amount as JSON",
    "audit Solidity smart contracts for reentrancy",
    "translate a legal contract",
)


def ans(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ANS, *args], capture_output=True, text=True, **kw)


def answers(url: str) -> list[Any]:
    out = []
    with AgtpClient(
        url,
        agent_id="agtp://probe.example/agents/b",
        principal_id="ops",
        scope="discovery:query zone:finance",
    ) as client:
        jwks = client.jwks()
        for intent in INTENTS:
            for params in (
                {"intent": intent, "limit": 5},
                # scored from the facet-sums file, which a backup leaves out (a cache)
                {"intent": intent, "limit": 5, "capability_domains": ["tools", "examples"]},
            ):
                resp = client.discover(params)
                verify_discover_result(resp.result, jwks, params)
                out.append(
                    [(r["canonical_id"], r["rank_score"]) for r in resp.result["results"]]
                )
    return out


def test_backup_while_serving_restores_the_same_answers(tmp_path: Path) -> None:
    cfg = tmp_path / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n")
    data = tmp_path / "data"
    srv = start_server(data, "--demo", "--config", str(cfg))
    try:
        env = {
            **os.environ,
            "ANS": ANS,
            "ANS_SERVER": srv.url,
            "GOVERNANCE_KEY": str(data / "demo-governance-key.pem"),
        }
        reg = subprocess.run(
            [str(ROOT / "examples" / "register.sh")], env=env, capture_output=True, text=True
        )
        assert reg.returncode == 0, reg.stderr
        before = answers(srv.url)
        done = ans("backup", str(tmp_path / "bk"), "--data-dir", str(data))  # server running
        assert done.returncode == 0, done.stderr
        assert "65 agents" in done.stdout  # the demo's 64 and the example agent
    finally:
        stop_server(srv)
    manifest = json.loads((tmp_path / "bk" / "backup.json").read_text())
    copied = {f["path"] for f in manifest["files"]}
    assert {"registry.sqlite3", "audit.jsonl", "ans-signing-key.pem"} <= copied
    assert (data / "facet-sums.sqlite").is_file()
    assert not any(p.startswith("facet-sums") for p in copied)
    restored = tmp_path / "restored"
    done = ans("restore", str(tmp_path / "bk"), "--data-dir", str(restored))
    assert done.returncode == 0, done.stderr
    again = ans("restore", str(tmp_path / "bk"), "--data-dir", str(restored))
    assert again.returncode == 2 and "not empty" in again.stderr
    assert again.stderr.count("\n") == 1
    srv = start_server(restored, "--demo", "--config", str(cfg))
    try:
        assert answers(srv.url) == before  # same agents, same ranking, same signing key
    finally:
        stop_server(srv)
    assert ans("audit", "verify", "--data-dir", str(restored)).returncode == 0


def test_restore_refuses_a_tampered_backup(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = start_server(data, "--demo")
    stop_server(srv)
    assert ans("backup", str(tmp_path / "bk"), "--data-dir", str(data)).returncode == 0
    with open(tmp_path / "bk" / "audit.jsonl", "ab") as fh:
        fh.write(b'{"forged": true}\n')
    done = ans("restore", str(tmp_path / "bk"), "--data-dir", str(tmp_path / "r"))
    assert done.returncode == 2
    assert "does not match backup.json" in done.stderr
    assert not (tmp_path / "r").exists()
    nothing = ans("backup", str(tmp_path / "b2"), "--data-dir", str(tmp_path / "nowhere"))
    assert nothing.returncode == 2 and "holds no registry" in nothing.stderr
    inside = ans("backup", str(data / "inner"), "--data-dir", str(data))
    assert inside.returncode == 2 and "inside the data directory" in inside.stderr
    assert inside.stderr.count("\n") == 1 and not (data / "inner").exists()


@pytest.mark.parametrize("bad", ["backup.json", "registry.sqlite3"])
def test_restore_refuses_a_backup_missing_a_part(tmp_path: Path, bad: str) -> None:
    data = tmp_path / "data"
    stop_server(start_server(data, "--demo"))
    assert ans("backup", str(tmp_path / "bk"), "--data-dir", str(data)).returncode == 0
    (tmp_path / "bk" / bad).unlink()
    done = ans("restore", str(tmp_path / "bk"), "--data-dir", str(tmp_path / "r"))
    assert done.returncode == 2 and done.stderr.startswith("ans: ")
