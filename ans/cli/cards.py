"""``ans import-cards PATH``: HAIDIP / A2A agent cards into the data
directory as self-asserted tier-3 records (:mod:`ans.haidip_cards`)."""

from __future__ import annotations

import argparse
import sys

from ..config import ConfigError


def cmd_import_cards(args: argparse.Namespace) -> int:
    """Exit 0 when at least one card was imported (or already there) and, with
    --strict, none was refused; 1 otherwise; 2 on usage errors (one line)."""
    from ans.protocol.request_types import ZONE_RE

    from .. import config as config_mod
    from ..datadir_lock import DataDirBusy
    from ..haidip_cards import card_files, import_cards
    from ..preflight import check_data_dir
    from ..server import configure_logging

    if args.zone is not None and ZONE_RE.fullmatch(args.zone) is None:
        raise ConfigError(f"--zone must be a zone id such as zone:finance, got {args.zone[:60]!r}")
    try:
        card_files(args.path)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    cfg = config_mod.load(args.config, data_dir=args.data_dir, store=args.store)
    check_data_dir(cfg.data_dir)
    configure_logging("warning", cfg.log_format)

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr)

    try:
        report = import_cards(
            cfg, args.path, zone=args.zone, principal_id=args.principal_id, progress=progress
        )
    except DataDirBusy as exc:
        raise ConfigError(f"{exc}; stop the server or import while it is stopped") from None
    print(
        f"imported {report.imported}, unchanged {report.unchanged}, "
        f"refused {len(report.refused)} (self-asserted, trust tier 3)"
    )
    if args.strict and report.refused:
        return 1
    return 0 if report.imported + report.unchanged > 0 else 1
