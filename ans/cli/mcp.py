"""``ans mcp``: the operator's hand on the MCP registry's trust store.

* ``ans mcp keys`` -- every agent_id with its pinned key, the rotated-out key
  and until when it is accepted, and when it was last announced;
* ``ans mcp rotate-key AGENT_ID --public-key NEW.pem`` -- pin a new key for
  an agent that lost the old one's private half (no ``rotation_signature``
  possible); the old key stays accepted for ``--grace`` seconds;
* ``ans mcp forget AGENT_ID`` -- unpin: the next valid announcement for the
  id pins whatever key it carries (the agent stays listed until its TTL).

They work on the registry store directly (``--data-dir`` / ``--store``)
while holding the data directory's lock (as ``ans import`` does: stop the
node whose data directory is named, other nodes over a PostgreSQL store may
run), and write an audit record (``mcp_key_rotated_by_operator``,
``mcp_key_forgotten``) to that data directory's audit log.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..config import ConfigError

EXAMPLES = {
    "keys": ["ans mcp keys --data-dir ans-data"],
    "rotate-key": [
        "ans mcp rotate-key 3cde1b52-1fc2-4f7b-8d8c-5e3e6f5c9c1d --public-key new.pem "
        "--data-dir ans-data"
    ],
    "forget": ["ans mcp forget 3cde1b52-1fc2-4f7b-8d8c-5e3e6f5c9c1d --data-dir ans-data"],
}


def add_mcp_parser(sub: Any) -> None:
    m = sub.add_parser("mcp", help="the MCP registry's trust store (pinned agent keys)")
    msub = m.add_subparsers(dest="mcp_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--data-dir", type=Path, help="the server's data directory (locked while running)"
        )
        p.add_argument("--store", metavar="PATH|URL", help="the registry store, as for ans serve")
        p.add_argument("--config", type=Path, help="TOML configuration file")

    k = msub.add_parser("keys", help="list the pinned keys and heartbeats")
    common(k)
    r = msub.add_parser("rotate-key", help="pin a new key for an agent_id (operator rotation)")
    r.add_argument("agent_id", help="the agent's UUIDv4")
    r.add_argument("--public-key", type=Path, required=True, help="PEM file of the new public key")
    r.add_argument(
        "--grace",
        type=float,
        default=None,
        help="seconds the old key stays accepted (default [mcp] key_grace_seconds)",
    )
    common(r)
    f = msub.add_parser("forget", help="unpin an agent_id: its next announcement pins a key")
    f.add_argument("agent_id", help="the agent's UUIDv4")
    common(f)
    for name, sp in (("keys", k), ("rotate-key", r), ("forget", f)):
        sp.epilog = "examples:\n" + "\n".join(f"  {e}" for e in EXAMPLES[name])


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def cmd_mcp(args: argparse.Namespace) -> int:
    from .. import config as config_mod
    from ..datadir_lock import DataDirBusy, DataDirLock
    from ..governance.audit import AuditLog
    from ..governance.clock import utc_now
    from ..preflight import check_data_dir
    from ..store_open import default_node, open_store

    cfg = config_mod.load(args.config, data_dir=args.data_dir, store=args.store)
    if not cfg.store and not (cfg.data_dir / "registry.sqlite3").is_file():
        # a mistyped --data-dir would otherwise get a fresh, empty registry
        raise ConfigError(f"{cfg.data_dir} holds no ANS registry (registry.sqlite3)")
    check_data_dir(cfg.data_dir)
    try:
        lock = DataDirLock.acquire(cfg.data_dir, "ans mcp")
    except DataDirBusy as exc:
        raise ConfigError(f"{exc}; stop that node first") from None
    try:
        store = open_store(
            cfg.store or None, data_dir=cfg.data_dir, node=default_node(cfg.store, cfg.data_dir)
        )
        audit = AuditLog(cfg.data_dir / "audit.jsonl", utc_now, fsync=cfg.audit_fsync)
        try:
            return _run(args, cfg, store, audit)
        finally:
            audit.close()
            store.close()
    finally:
        lock.release()


def _run(args: argparse.Namespace, cfg: Any, store: Any, audit: Any) -> int:
    from ..governance.mcp_signature import load_agent_key
    from ..mcp.trust_store import trust_store_for
    from ..protocol.errors import AgtpError
    from ..protocol.mcp_messages import parse_agent_id

    trust = trust_store_for(store)
    if args.mcp_command == "keys":
        after, total = "", 0
        while page := trust.page(after, 500, float("-inf")):
            for rec in page:
                total += 1
                print(
                    f"{rec.agent_id}  key {rec.key_id[:16] or '(unpinned)'}  "
                    f"previous {(rec.previous_key_id or '-')[:16]} "
                    f"until {_when(rec.previous_until)}"
                    f"  last_seen {_when(rec.last_seen)}"
                    + ("  removed" if rec.removed_at is not None else "")
                )
            after = page[-1].agent_id
        print(f"{total} agent ids in the trust store")
        return 0
    try:
        agent_id = parse_agent_id(args.agent_id, "AGENT_ID")
    except AgtpError as exc:
        raise ConfigError(exc.message) from None
    pinned = trust.get(agent_id)
    if pinned is None:
        print(f"ans: no agent {agent_id} in the MCP trust store", file=sys.stderr)
        return 1
    if args.mcp_command == "forget":
        import dataclasses

        unpinned = dataclasses.replace(
            pinned,
            key_pem="",
            key_id="",
            previous_key_pem=None,
            previous_key_id=None,
            previous_until=None,
        )
        if not trust.replace(unpinned, pinned.key_id):
            print("ans: the key changed meanwhile; run the command again", file=sys.stderr)
            return 1
        audit.record("mcp_key_forgotten", method="CLI", mcp_agent_id=agent_id, key_id=pinned.key_id)
        print(f"{agent_id}: unpinned (was key {pinned.key_id[:16]})")
        return 0
    pem = args.public_key.read_text(encoding="ascii", errors="replace")
    try:
        loaded = load_agent_key(pem)
    except AgtpError as exc:
        raise ConfigError(f"{args.public_key}: {exc.message}") from None
    grace = cfg.mcp.key_grace_seconds if args.grace is None else args.grace
    if not 0 <= grace <= 365 * 86400:
        raise ConfigError("--grace must be 0..31536000 seconds")
    import dataclasses

    rotated = dataclasses.replace(
        pinned,
        key_pem=pem,
        key_id=loaded.key_id,
        previous_key_pem=pinned.key_pem or None,
        previous_key_id=pinned.key_id or None,
        previous_until=(time.time() + grace) if pinned.key_id else None,
    )
    if not trust.replace(rotated, pinned.key_id):
        print("ans: the key changed meanwhile; run the command again", file=sys.stderr)
        return 1
    audit.record(
        "mcp_key_rotated_by_operator",
        method="CLI",
        mcp_agent_id=agent_id,
        key_id=loaded.key_id,
        previous_key_id=pinned.key_id,
        grace_seconds=grace,
    )
    print(
        f"{agent_id}: key {loaded.key_id[:16]} pinned; {pinned.key_id[:16] or '-'} "
        f"accepted until {_when(rotated.previous_until)}"
    )
    return 0
