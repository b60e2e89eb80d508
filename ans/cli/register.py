"""``ans activate`` and ``ans lifecycle``: register a signed manifest and send
governance-signed lifecycle events to a server."""

from __future__ import annotations

import argparse
import json
import sys

from .calls import _ask, _print_error
from .common import _read_json, _read_key


def cmd_activate(args: argparse.Namespace) -> int:
    doc = _read_json(args.manifest)
    if isinstance(doc, dict) and "manifest" in doc:
        params = {"manifest": doc["manifest"], "capabilities": doc.get("capabilities", {})}
    else:
        params = {"manifest": doc, "capabilities": {}}
    if args.capabilities:
        params["capabilities"] = _read_json(args.capabilities)
    asked = _ask(args, "ACTIVATE", params)
    if asked is None:
        return 2
    resp = asked[0]
    if resp.status != 200:
        return _print_error(resp)
    print(json.dumps(resp.result, indent=2))
    return 0


def cmd_lifecycle(args: argparse.Namespace) -> int:
    import uuid
    from datetime import UTC, datetime

    from ans.governance.lifecycle import make_event
    from ans.protocol.errors import AgtpError

    key = _read_key(args.governance_key, args.kid)
    try:
        event = make_event(
            args.event.upper(),
            args.canonical_id,
            key,
            datetime.now(UTC),
            event_id=args.event_id or f"evt-{uuid.uuid4().hex}",
            reason=args.reason,
            successor_agent=args.successor,
        )
    except AgtpError as exc:
        print(f"ans: {exc.message}", file=sys.stderr)
        return 2
    asked = _ask(args, "LIFECYCLE", {"event": event})
    if asked is None:
        return 2
    resp = asked[0]
    if resp.status != 200:
        return _print_error(resp)
    print(json.dumps(resp.result, indent=2))
    return 0
