"""The ``ans`` command line: serve, discover, activate, lifecycle events,
audit-log verification, federation peer checks, and governance helpers
(keygen, sign-manifest) so operators and tests can act as a governance
platform.

This module owns the entry point (``ans.cli:main``): parse the arguments,
dispatch to the command's module, and turn configuration and I/O errors into
exit codes. The parser is in ``parser.py``; each command group has its module.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..config import ConfigError
from .apikey import cmd_apikey_new
from .audit import cmd_audit_verify
from .cards import cmd_import_cards
from .config import cmd_backup, cmd_config_show, cmd_restore
from .discover import cmd_discover
from .governance import cmd_keygen, cmd_sign
from .mcp import cmd_mcp
from .parser import _parser
from .peers import cmd_peers_check
from .register import cmd_activate, cmd_lifecycle
from .serve import cmd_import, cmd_serve

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        code = _run(args)
        sys.stdout.flush()  # here, so that a closed pipe is met inside the try
        return code
    except ConfigError as exc:
        print(f"ans: configuration error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`ans discover ... | head`): stop quietly; the
        # interpreter must not complain about stdout when it flushes at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except (OSError, ValueError) as exc:
        print(f"ans: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.command == "serve":
        return cmd_serve(args)
    if args.command == "discover":
        return cmd_discover(args)
    if args.command == "import":
        return cmd_import(args)
    if args.command == "import-cards":
        return cmd_import_cards(args)
    if args.command == "activate":
        return cmd_activate(args)
    if args.command == "lifecycle":
        return cmd_lifecycle(args)
    if args.command == "audit":
        return cmd_audit_verify(args)
    if args.command == "peers":
        return cmd_peers_check(args)
    if args.command == "config":
        return cmd_config_show(args)
    if args.command == "backup":
        return cmd_backup(args)
    if args.command == "restore":
        return cmd_restore(args)
    if args.command == "apikey":
        return cmd_apikey_new(args)
    if args.command == "mcp":
        return cmd_mcp(args)
    if args.command == "governance" and args.gov_command == "keygen":
        return cmd_keygen(args)
    return cmd_sign(args)
