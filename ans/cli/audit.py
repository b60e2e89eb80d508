"""``ans audit verify``: check the audit log's hash chain offline."""

from __future__ import annotations

import argparse
import sys


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from ans.governance.audit import ChainBreak, check_chain

    path = args.file or args.data_dir / "audit.jsonl"
    if not path.exists():
        print(f"ans: no audit log at {path}", file=sys.stderr)
        return 2
    with open(path, "rb") as fh:
        outcome = check_chain(fh)
    if isinstance(outcome, ChainBreak):
        print(
            f"audit log {path}: BROKEN at line {outcome.line}: {outcome.kind}: {outcome.reason}",
            file=sys.stderr,
        )
        return 1
    print(
        f"audit log {path}: intact, {outcome.records} records; "
        f"head seq {outcome.seq} sha256 {outcome.hash}"
    )
    return 0
