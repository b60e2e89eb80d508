"""The demo catalog re-activates on every `ans serve --demo` start: an agent the
operator replaced with a newer manifest (or retired) is left as stored."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ans.governance.signing import sign_document
from ans.protocol.messages import ActivateRequest, Identity
from ans.protocol.scope import parse_authority_scope

from ans.config import Config
from ans.demo import activate_demo, demo_capabilities, demo_manifest, load_catalog
from ans.wiring import build_service

GOV = Identity(
    "agtp://gov.example/agents/platform", "ops", parse_authority_scope("discovery:register")
)


def test_restart_keeps_an_operator_replaced_demo_agent(tmp_path: Path, embedder: Any) -> None:
    built = build_service(Config(data_dir=tmp_path / "d", demo=True), embedder=embedder)
    svc, key = built.service, built.demo_key
    assert key is not None
    try:
        total = activate_demo(svc, key)
        entry = load_catalog()[0]
        now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        newer = {**demo_manifest(entry), "last_updated": now}
        newer["job_description"] = "Replaced by the operator."
        signed = sign_document(newer, key, "signature")
        svc.activate(ActivateRequest(GOV, "t-new", signed, demo_capabilities(entry)))
        assert activate_demo(svc, key) == total - 1  # no Conflict escapes
        stored = svc.store.get(newer["canonical_id"])
        assert (
            stored is not None and stored.manifest["job_description"] == "Replaced by the operator."
        )
    finally:
        svc.store.close()
        if built.lock is not None:
            built.lock.release()
