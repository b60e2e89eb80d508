"""``ans mcp keys | rotate-key | forget`` on a real data directory: the
operator's rotation pins the new key (the old one keeps its grace), forget
lets the next announcement pin any key, both audited."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ans.cli import main
from ans.store import SQLiteStore
from tests.ans.test_mcp_support import AgentKey, agent_object, announce, make_world_factory


@pytest.fixture
def factory(tmp_path: Path, embedder: Any, gov_key: Any) -> Iterator[Any]:
    gen = make_world_factory(tmp_path, embedder, gov_key)
    yield next(gen)
    with contextlib.suppress(StopIteration):
        next(gen)


def test_rotate_and_forget(
    factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = factory()
    data = w.svc.config.data_dir
    old, new, other = AgentKey(), AgentKey(), AgentKey("rsa")
    agent = agent_object(old)
    assert w.post(announce(old, agent))[0] == 200
    w.svc.audit.close()
    w.svc.store.close()

    assert main(["mcp", "keys", "--data-dir", str(data)]) == 0
    assert agent["agent_id"] in capsys.readouterr().out
    pem = tmp_path / "new.pem"
    pem.write_text(new.pem)
    code = main(
        [
            "mcp",
            "rotate-key",
            agent["agent_id"],
            "--public-key",
            str(pem),
            "--data-dir",
            str(data),
            "--grace",
            "0",
        ]
    )
    assert code == 0, capsys.readouterr()
    events = [json.loads(x)["event"] for x in (data / "audit.jsonl").read_text().splitlines()]
    assert "mcp_key_rotated_by_operator" in events
    assert (
        main(["mcp", "forget", "00000000-0000-4000-8000-000000000000", "--data-dir", str(data)])
        == 1
    )
    assert (
        main(["mcp", "rotate-key", "nope", "--public-key", str(pem), "--data-dir", str(data)]) == 2
    )

    # a node over the same store: the new key is pinned, the old one (grace 0) is not
    w2 = factory(store=SQLiteStore(data / "registry.sqlite3"))
    w2.clock.now = datetime.now(UTC) + timedelta(hours=1)  # the CLI rotated on the wall clock
    assert w2.post(announce(old, agent))[0] == 401
    assert w2.post(announce(new, {**agent, "public_key": new.pem}))[0] == 200
    assert w2.post(announce(other, {**agent, "public_key": other.pem}))[0] == 409
    w2.svc.audit.close()
    w2.svc.store.close()

    assert main(["mcp", "forget", agent["agent_id"], "--data-dir", str(data)]) == 0
    w3 = factory(store=SQLiteStore(data / "registry.sqlite3"))
    status, body = w3.post(announce(other, {**agent, "public_key": other.pem}))
    assert status == 200, body
    assert any(r["event"] == "mcp_key_pinned" for r in w3.audit())


def test_a_data_dir_without_a_registry_is_refused_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "mistyped"
    assert main(["mcp", "keys", "--data-dir", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "holds no ANS registry" in err and err.count("\n") == 1
    assert not missing.exists()
