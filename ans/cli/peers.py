"""``ans peers check``: ask every configured federation peer once, as a
federated DISCOVER would, and print a table of who answered and verified."""

from __future__ import annotations

import argparse
import getpass
import json
import sys

from ..config import ConfigError
from .common import _print_rows


def _key_cell(kids: tuple[str, ...]) -> str:
    """The peer key we trust: its id's start, how many when several, '-' for none."""
    if not kids:
        return "-"
    return f"{kids[0][:12]}…" if len(kids) == 1 else f"{len(kids)} keys"


def cmd_peers_check(args: argparse.Namespace) -> int:
    import asyncio

    from ans.federation.check import DEFAULT_INTENT, Asker, check_peers
    from ans.federation.peers import PeerConfigError, parse_peer_flag
    from ans.governance.policy import ZonePolicy

    from .. import config as config_mod
    from ..server import configure_logging
    from ..service import utc_now
    from ..wiring import peer_transport

    try:
        flags = tuple(parse_peer_flag(p) for p in args.peer or ())
    except PeerConfigError as exc:
        raise ConfigError(str(exc)) from None
    cfg = config_mod.load(args.config, peers=flags or None)
    if not cfg.peers:
        print("ans: no peers configured (use --config FILE or --peer TIER@URL)", file=sys.stderr)
        return 2
    configure_logging("error")  # the table says what the warnings would (on stderr otherwise)
    asker = Asker(args.agent_id, args.principal_id or getpass.getuser() or "cli-user", args.scope)
    zones = ZonePolicy.of(
        cfg.restricted_zones, cfg.public_zones, cfg.unlisted_zones == "restricted"
    )
    checks = asyncio.run(
        check_peers(
            cfg.peers,
            cfg.federation,
            peer_transport(cfg.federation.max_response_bytes),
            asker,
            intent=args.intent or DEFAULT_INTENT,
            zones=zones,
            min_capability_match=cfg.relevance.threshold,
            clock=utc_now,
        )
    )
    failed = sum(not c.ok for c in checks)
    if args.json:
        doc = [
            {
                "url": c.peer.url,
                "tier": c.peer.tier,
                "ok": c.ok,
                "key_ids": list(c.kids),
                "ms": round(c.ms, 1),
                "results": c.results,
                "code": c.code,
                "message": c.message,
            }
            for c in checks
        ]
        print(json.dumps(doc, indent=2))
        return 1 if failed else 0
    rows = [["peer", "tier", "key", "status", "ms", "results"]]
    for c in checks:
        rows.append(
            [
                c.peer.url,
                str(c.peer.tier),
                _key_cell(c.kids),
                "ok" if c.ok else f"FAIL {c.code}",
                f"{c.ms:.0f}",
                str(c.results),
            ]
        )
    _print_rows(rows)
    for c in checks:
        if not c.ok:
            print(f"{c.code}: {c.message}", file=sys.stderr)  # the message names the peer
    print(f"{len(checks) - failed} of {len(checks)} peers answered and verified")
    return 1 if failed else 0
