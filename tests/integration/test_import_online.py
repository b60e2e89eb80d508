"""ans import --server: bulk ACTIVATE into a running server, progress in records."""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import orjson
from ans.governance.keys import SigningKey
from ans.governance.signing import sign_document

from ans.client import AgtpClient
from tools.launcher import start_server, stop_server

ROOT = Path(__file__).resolve().parents[2]
ANS = str(Path(sys.executable).with_name("ans"))
N = 40


def catalog(key: SigningKey, path: Path) -> None:
    base = json.loads((ROOT / "examples" / "agent.json").read_text())
    with open(path, "wb") as fh:
        for i in range(N):
            doc = copy.deepcopy(base)
            m = doc["manifest"]
            m["agent_label"] = f"bulk-agent-{i}"
            m["manifest_uri"] = f"agtp://agtp.bulk.example/agents/bulk-agent-{i}"
            m["canonical_id"] = hashlib.sha256(m["manifest_uri"].encode()).hexdigest()
            m["org_domain"] = "bulk.example"
            m["job_description"] = f"Bulk agent number {i}: reconciles ledger batch {i}."
            doc["manifest"] = sign_document(m, key, "signature")
            fh.write(orjson.dumps(doc) + b"\n")
            if i == 5:
                fh.write(b"\n")  # blank lines are not records
        fh.write(b'{"manifest": {"document_type": "agtp-manifest"}}\n')  # refused
        # refused as the server would parse them: a duplicate key; an integer no signed
        # answer can carry, sent as written (never re-serialized into a float)
        fh.write(b'{"manifest": {}, "manifest": {}}\n')
        doc = copy.deepcopy(base)
        doc["capabilities"] = {**doc.get("capabilities", {}), "n": 2**80}
        fh.write(json.dumps(doc).encode() + b"\n")


def test_import_into_a_running_server_counts_records(tmp_path: Path) -> None:
    cfg = tmp_path / "ans.toml"
    # a low rate limit: the import must wait on 429s and lose nothing
    cfg.write_text("[rate_limit]\nrate = 20.0\nburst = 10\n")
    data = tmp_path / "data"
    srv = start_server(data, "--demo", "--config", str(cfg))
    try:
        key = SigningKey.load_or_create(data / "demo-governance-key.pem")
        lines = tmp_path / "bulk.jsonl"
        catalog(key, lines)
        offline = subprocess.run(
            [ANS, "import", str(lines), "--data-dir", str(data)], capture_output=True, text=True
        )
        assert offline.returncode == 2 and "--server" in offline.stderr  # the server holds it
        run = subprocess.run(
            [ANS, "import", str(lines), "--server", srv.url, "--concurrency", "8"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr
        summary = [x for x in run.stderr.splitlines() if "records in" in x]
        assert len(summary) == 1
        assert f"{N + 3:,} records" in summary[0]
        assert f"{N:,} imported" in summary[0] and "3 refused" in summary[0]
        assert "retries after 429/503" in summary[0]
        assert "manifest_missing_field" in run.stderr
        assert "malformed_json" in run.stderr and "invalid_capabilities" in run.stderr
        with AgtpClient(
            srv.url,
            agent_id="agtp://p.example/agents/x",
            principal_id="p",
            scope="discovery:query zone:finance",
        ) as client:
            got = client.discover({"intent": "reconciles ledger batch 17", "limit": 3})
        assert got.result["results"][0]["agent_label"] == "bulk-agent-17"
        again = subprocess.run(
            [ANS, "import", str(lines), "--server", srv.url], capture_output=True, text=True
        )
        assert f"{N:,} unchanged" in again.stderr
    finally:
        stop_server(srv)


def test_plain_progress_lines_count_records(tmp_path: Path) -> None:
    import io

    from ans.import_progress import ImportProgress, count_records

    f = tmp_path / "x.jsonl"
    f.write_bytes(b"{}\n\n{}\n   \n{}")  # 3 records, no final newline
    assert count_records([f]) == 3
    now = [0.0]
    out = io.StringIO()
    progress = ImportProgress(40_000, out, interval=5.0, clock=lambda: now[0])
    progress.update(100)
    now[0] = 6.0
    progress.update(36_000)
    progress.done("summary")
    lines = out.getvalue().splitlines()
    assert lines == [
        "ans import: 36,000 of 40,000 records (90%), 6,000/s, about 1 s left",
        "summary",
    ]


def test_a_bad_or_unreachable_server_is_one_line(tmp_path: Path) -> None:
    lines = tmp_path / "one.jsonl"
    lines.write_text("{}\n")
    for server, says in (
        ("nonsense", "must be an http:// or https:// URL"),
        ("http://127.0.0.1:9", "cannot import into http://127.0.0.1:9"),
    ):
        run = subprocess.run(
            [ANS, "import", str(lines), "--server", server], capture_output=True, text=True
        )
        assert run.returncode == 2, run.stderr
        errors = [x for x in run.stderr.splitlines() if x.startswith("ans: ")]
        assert len(errors) == 1 and says in errors[0], run.stderr
        assert "Traceback" not in run.stderr
