"""``ans config show`` (the effective configuration and where each value came
from), ``ans backup`` and ``ans restore``."""

from __future__ import annotations

import argparse

from .. import config as config_mod
from ..config_env import show


def cmd_config_show(args: argparse.Namespace) -> int:
    cfg, origin = config_mod.load_with_origin(args.config)
    print(
        show(cfg, config_mod.SECTIONS, config_mod.RENAMED, config_mod.TABLES, origin),
        end="",
    )
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    from ..backup import backup

    report = backup(args.data_dir, args.target)
    print(
        f"backup of {args.data_dir} in {report.directory}: {report.registry_rows} agents, "
        f"{report.files} files, {report.bytes:,} bytes"
    )
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from ..backup import restore

    doc = restore(args.source, args.data_dir)
    print(
        f"restored {args.source} ({doc['registry_rows']} agents, taken {doc['created_at']}) "
        f"into {args.data_dir}; start it as the original was started (same flags and "
        f"trusted keys, e.g. --demo), with --data-dir {args.data_dir}"
    )
    return 0
