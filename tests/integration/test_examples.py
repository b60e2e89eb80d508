"""examples/: the example agent registers with a running demo server, verbatim,
and sign-manifest names every problem of a broken manifest at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.launcher import RunningServer, start_server, stop_server

ROOT = Path(__file__).resolve().parents[2]
ANS = str(Path(sys.executable).with_name("ans"))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, Path]]:
    data = tmp_path_factory.mktemp("examples") / "data"
    cfg = data.parent / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n")
    srv = start_server(data, "--demo", "--config", str(cfg))
    yield srv, data
    stop_server(srv)


def test_register_script_activates_and_finds_the_example_agent(
    demo: tuple[RunningServer, Path],
) -> None:
    srv, data = demo
    env = {
        **os.environ,
        "ANS": ANS,
        "ANS_SERVER": srv.url,
        "GOVERNANCE_KEY": str(data / "demo-governance-key.pem"),
    }
    run = subprocess.run(
        [str(ROOT / "examples" / "register.sh")], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("activated ")
    assert "invoice-line-extractor@northwind-ap.example" in lines[2]  # rank 1
    assert "signature: verified" in run.stdout


def test_sign_manifest_names_every_problem_at_once(tmp_path: Path) -> None:
    doc = json.loads((ROOT / "examples" / "agent.json").read_text())
    manifest = doc["manifest"]
    for name in ("org_domain", "principal_org", "activated_at"):
        del manifest[name]
    manifest["trust_tier"] = 7
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(doc))
    key = tmp_path / "gov.pem"
    subprocess.run(
        [ANS, "governance", "keygen", "--key", str(key)], check=True, capture_output=True
    )
    run = subprocess.run(
        [ANS, "governance", "sign-manifest", str(broken), "--key", str(key)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and run.stdout == ""
    err = run.stderr.strip()
    assert "\n" not in err
    for name in ("'org_domain'", "'principal_org'", "'activated_at'", "'trust_tier' must be"):
        assert name in err, err


def test_activate_names_every_missing_field_in_one_refusal(
    demo: tuple[RunningServer, Path], tmp_path: Path
) -> None:
    srv, _ = demo
    doc = json.loads((ROOT / "examples" / "agent.json").read_text())
    for name in ("cert_status", "job_description"):
        del doc["manifest"][name]
    doc["manifest"]["signature"] = {}
    path = tmp_path / "unsigned.json"
    path.write_text(json.dumps(doc))
    run = subprocess.run(
        [ANS, "activate", str(path), "--server", srv.url], capture_output=True, text=True
    )
    assert run.returncode != 0
    assert "manifest_missing_field" in run.stderr
    assert "'cert_status'" in run.stderr and "'job_description'" in run.stderr
