"""``ans serve`` and ``ans import``: the commands that run on the server's
own data directory (start the server; bulk-register agents offline)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..config import ConfigError


def cmd_serve(args: argparse.Namespace) -> int:
    from ans.federation.peers import PeerConfigError, parse_peer_flag

    from .. import config as config_mod
    from ..preflight import check_serve

    try:
        peers = tuple(parse_peer_flag(p) for p in args.peer or ())
    except PeerConfigError as exc:
        raise ConfigError(str(exc)) from None
    cfg = config_mod.load(
        args.config,
        listen=args.listen,
        native_listen=args.native_listen,
        data_dir=args.data_dir,
        store=args.store,
        governance_jwks=tuple(args.governance_jwks) if args.governance_jwks else None,
        demo=args.demo,
        log_format=args.log_format,
        log_level=args.log_level,
        peers=peers or None,
        workers=args.workers,
    )
    check_serve(cfg)  # a wrong path, file or port is one line, before any start-up work
    from ..malloc_arenas import keep_large_blocks, limit_arenas

    limit_arenas()  # before any thread starts; the workers inherit it
    keep_large_blocks()  # a DISCOVER's large arrays stay in the heap between queries
    from ..cores import default_workers
    from ..store_open import is_postgres

    workers = cfg.workers or default_workers()
    # A store other processes write to (PostgreSQL: other nodes) is followed
    # through its change feed, which the worker path does, even for one worker.
    supervised = workers > 1 or is_postgres(cfg.store)
    if supervised:
        _metrics_shared_by_workers(cfg.data_dir)  # before prometheus_client is imported
    from .. import drain
    from ..http2_defences import UnsupportedHypercorn
    from ..server import configure_logging, serve_forever
    from ..wiring import build_service
    from ..workers import serve_workers

    try:
        drain.install()  # the HTTP/2 defences: only on the hypercorn they were written for
    except UnsupportedHypercorn as exc:
        print(f"ans: {exc}", file=sys.stderr)
        return 2
    configure_logging(cfg.log_level, cfg.log_format)
    built = build_service(cfg)
    if built.demo_key is not None:
        from ..demo import activate_demo

        n = activate_demo(built.service, built.demo_key)
        print(
            f"ANS demo catalog: {n} agents activated (demo governance kid {built.demo_key.kid})",
            flush=True,
        )
    if supervised:
        return serve_workers(built, cfg, workers)
    built.service.discovery.warm()  # at start-up, not in the first DISCOVER
    serve_forever(built.service, cfg, gate=built.gate, freshness=built.freshness, lock=built.lock)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """Exit 0 when at least one line was imported (or was already there,
    unchanged) and nothing crashed; 1 when no line was accepted, or with
    --strict any refused; 2 on usage errors (bad flags, unreadable files,
    data directory in use)."""
    from .. import config as config_mod
    from ..datadir_lock import DataDirBusy
    from ..importer import import_files
    from ..preflight import check_data_dir
    from ..server import configure_logging

    if args.batch < 1 or (args.workers is not None and args.workers < 1):
        raise ConfigError("--batch and --workers must be at least 1")
    for f in args.files:
        if not f.is_file():
            raise ConfigError(f"no such file: {f}")
    if args.server:
        return _import_online(args)
    cfg = config_mod.load(
        args.config,
        data_dir=args.data_dir,
        store=args.store,
        governance_jwks=tuple(args.governance_jwks) if args.governance_jwks else None,
    )
    check_data_dir(cfg.data_dir)  # a mistyped --data-dir must not become a fresh registry
    configure_logging("warning", cfg.log_format)
    try:
        report = import_files(cfg, args.files, batch=args.batch, workers=args.workers)
    except DataDirBusy as exc:
        raise ConfigError(
            f"{exc}, or import into the running server: ans import --server URL FILE..."
        ) from None
    for r in report.refused[: args.refusals]:
        print(
            f"{r.file}:{r.line}: {r.status} {r.code}: {r.message} ({r.canonical_id[:80]})",
            file=sys.stderr,
        )
    if len(report.refused) > args.refusals:
        print(
            f"... {len(report.refused) - args.refusals} more refused lines "
            "(all in the audit log: activation_refused)",
            file=sys.stderr,
        )
    print(
        f"imported {report.imported}, unchanged {report.unchanged}, "
        f"refused {len(report.refused)}, {report.rate:.0f} agents/s"
        + (", index snapshot written" if report.snapshot else "")
    )
    if args.strict and report.refused:
        return 1
    return 0 if report.imported + report.unchanged > 0 else 1


def _import_online(args: argparse.Namespace) -> int:
    """``ans import --server URL``: ACTIVATE every line on the running server."""
    import getpass

    from ..import_online import import_online

    if not 1 <= args.concurrency <= 256:
        raise ConfigError("--concurrency must be from 1 to 256")
    report = import_online(
        args.server,
        args.files,
        agent_id=args.agent_id,
        principal_id=args.principal_id or getpass.getuser(),
        scope=args.scope,
        concurrency=args.concurrency,
        verify=args.cacert or True,
    )
    for r in report.refused[: args.refusals]:
        print(f"{r.file}:{r.line}: {r.status} {r.code}: {r.message}", file=sys.stderr)
    if len(report.refused) > args.refusals:
        print(f"... {len(report.refused) - args.refusals} more refused lines", file=sys.stderr)
    if args.strict and report.refused:
        return 1
    return 0 if report.imported + report.unchanged > 0 else 1


def _metrics_shared_by_workers(data_dir: Path) -> None:
    """Point prometheus-client's multiprocess mode at ``DATA/metrics`` (emptied):
    every worker writes its samples there, and a scrape of any worker sums them."""
    import os

    if "prometheus_client" in sys.modules:
        # Too late (its value class is chosen at import), and not a fresh
        # `ans serve` process: an in-process caller must not leak the setting.
        return
    directory = data_dir / "metrics"
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.db"):
        old.unlink()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
