"""``ans audit verify``: check the audit logs' hash chains offline (every
worker's log of ``ans serve --workers N``: ``audit.jsonl`` and
``audit-worker-N.jsonl``; or one ``--file``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from ans.audited import AUDIT_FILE, all_log_paths

    if args.file:
        paths = [args.file]
    else:
        paths = all_log_paths(args.data_dir)
        if not paths:
            paths = [args.data_dir / AUDIT_FILE]
    status = 0
    for path in paths:
        status = max(status, _verify(path))
    return status


def _verify(path: Path) -> int:
    from ans.governance.audit import ChainBreak, check_chain

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
