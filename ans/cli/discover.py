"""``ans discover``: send DISCOVER, verify the signed answer, and print the
ranked table (or the JSON body)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .calls import _ask, _task_id
from .common import _print_rows


def cmd_discover(args: argparse.Namespace) -> int:
    from ans.governance.keys import KeyFileError
    from ans.protocol.errors import AgtpError

    from ..client import verify_attribution, verify_discover_answer

    if args.intent is None and args.name is None:
        print("ans: discover needs an INTENT or --name", file=sys.stderr)
        return 2
    params: dict[str, Any] = {}
    if args.intent is not None:
        params["intent"] = args.intent
    if args.name is not None:
        params["name"] = args.name
    for name in (
        "trust_tier_min",
        "behavioral_trust_min",
        "governance_zone",
        "org_domain",
        "limit",
        "preferred_agent",
    ):
        value = getattr(args, name)
        if value is not None:
            params[name] = value
    if args.domains:
        params["capability_domains"] = [d.strip() for d in args.domains.split(",") if d.strip()]
    if args.scope_negotiate:
        params["scope_negotiate"] = True
    asked = _ask(args, "DISCOVER", params, keys=True)
    if asked is None:
        return 2
    resp, jwks = asked
    # Every DISCOVER answer is signed, a refusal too: an unsigned or forged
    # one is rejected before anything of it is shown as the server's word.
    try:
        kid = verify_discover_answer(resp, jwks or {}, params, _task_id("DISCOVER"))
        # The newer dialect's answers also carry a signed Attribution-Record.
        newer = args.dialect == "agtp-09"
        if newer:
            verify_attribution(resp, jwks or {})
    except (AgtpError, KeyFileError) as exc:
        err = resp.error or {}
        print(
            f"ans: signature: NOT VERIFIED: {exc}; the {resp.status} "
            f"{str(err.get('code', 'answer'))[:60]} answer is not trusted",
            file=sys.stderr,
        )
        return 1
    if resp.status != 200:
        err = resp.error or {}
        print(
            f"ans: {resp.status} {err.get('code', '?')}: {err.get('message', '')} "
            f"(signed refusal, kid {kid})",
            file=sys.stderr,
        )
        return 2
    if newer:
        print(
            f"attribution: verified (Audit-ID {resp.headers.get('audit-id', '?')[:16]}...)",
            file=sys.stderr if args.json else sys.stdout,
        )
    # With --json, stdout holds the JSON document alone.
    if args.json:
        print(json.dumps(resp.body, indent=2, ensure_ascii=False))
    else:
        print_table(resp.result)
    print(
        f"signature: verified (ES256, kid {kid}, query_digest matches)",
        file=sys.stderr if args.json else sys.stdout,
    )
    return 0


def _score(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "-"


def print_table(result: dict[str, Any]) -> None:
    federated = "federation_path" in result
    header = ["#", "agent", "tier", "trust", "match", "score", "zone"]
    rows: list[list[str]] = [[*header, "from"] if federated else header]
    for r in result.get("results", []):
        row = [
            str(r["rank"]),
            f"{r['agent_label']}@{r['org_domain']}",
            str(r["trust_tier"]),
            f"{r['behavioral_trust_score']:.2f}",
            _score(r.get("capability_match_score")),  # none on a name resolution
            _score(r.get("rank_score")),
            str(r.get("governance_zone", "")),
        ]
        if federated:
            prov = r.get("provenance")
            peer = prov.get("peer", {}) if isinstance(prov, dict) else {}
            row.append(str(peer.get("url", "?")) if prov else "local")
        rows.append(row)
    _print_rows(rows)
    print(
        f"{result.get('returned', 0)} of {result.get('total_matches', 0)} matches "
        f"(query {result.get('query_id', '?')}, {result.get('generated_at', '')})"
    )
    resolution = result.get("resolution")
    if isinstance(resolution, dict):
        print(f"name {resolution.get('name')} -> canonical id {resolution.get('canonical_id')}")
    if federated:
        print(f"federation path: {' -> '.join(result['federation_path'])}")
    routing = result.get("routing")
    if isinstance(routing, dict):
        line = f"routing: preferred {str(routing.get('preferred_agent'))[:16]}"
        if routing.get("available"):
            line += " is available (#1)"
        else:
            line += f" unavailable ({routing.get('routing_reason')})"
            if "alternative" in routing:
                line += (
                    f"; #1 is the alternative {str(routing['alternative'])[:16]}"
                    f" (equivalent_confidence {routing.get('equivalent_confidence')})"
                )
            else:
                line += "; no equivalent alternative"
        print(line)
    for w in result.get("warnings", []):
        print(f"warning: {w.get('code')}: {w.get('message')}", file=sys.stderr)
