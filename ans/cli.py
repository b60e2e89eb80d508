"""The ``ans`` command line: serve, discover, activate, lifecycle events,
audit-log verification, federation peer checks, and governance helpers
(keygen, sign-manifest) so operators and tests can act as a governance
platform.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from pathlib import Path
from typing import Any

from .config import ConfigError

DEFAULT_SERVER = "http://127.0.0.1:4480"


def _add_identity(p: argparse.ArgumentParser, scope: str) -> None:
    p.add_argument(
        "--server",
        default=os.environ.get("ANS_SERVER", DEFAULT_SERVER),
        help=f"ANS base URL (default {DEFAULT_SERVER}; env ANS_SERVER); "
        "agtp[+cleartext]://HOST:PORT speaks the native framing to a --native-listen",
    )
    p.add_argument("--agent-id", default="agtp://localhost/agents/ans-cli", help="Agent-ID header")
    p.add_argument("--principal-id", default=None, help="Principal-ID header (default: $USER)")
    p.add_argument("--scope", default=scope, help=f"Authority-Scope header (default {scope!r})")
    p.add_argument("--cacert", default=None, help="CA bundle for https and agtp servers")
    p.add_argument("--timeout", type=float, default=10.0)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ans", description="ANS, the AGTP Agent Name Service")
    sub = ap.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the ANS server")
    s.add_argument("--listen", help="HOST:PORT (default 127.0.0.1:4480; port 0 picks a free one)")
    s.add_argument(
        "--native-listen",
        metavar="HOST:PORT",
        help="also serve the native AGTP/1.0 framing here (TLS 1.3 with the server's "
        "certificate, else cleartext); peers reach it as agtp[+cleartext]://HOST:PORT",
    )
    s.add_argument("--data-dir", type=Path, help="where the registry, keys and audit log live")
    s.add_argument(
        "--governance-jwks",
        type=Path,
        action="append",
        help="JWKS file of trusted governance-platform keys (repeatable)",
    )
    s.add_argument("--config", type=Path, help="TOML configuration file")
    s.add_argument(
        "--demo",
        action="store_true",
        default=None,
        help="register the demo catalog (signed by a generated demo governance key)",
    )
    s.add_argument(
        "--peer",
        action="append",
        metavar="TIER@URL",
        help="federate with a peer ANS granted TIER (1-3); its key comes from "
        "URL/.well-known/jwks.json (repeatable, e.g. --peer 2@http://127.0.0.1:4481)",
    )
    s.add_argument("--log-format", choices=["console", "json"])
    s.add_argument("--log-level", choices=["debug", "info", "warning", "error"])

    im = sub.add_parser(
        "import",
        help="bulk-register agents from JSON-lines files (same verification as ACTIVATE)",
    )
    im.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="FILE.jsonl",
        help='one ACTIVATE parameters object per line: {"manifest": ..., "capabilities": ...}',
    )
    im.add_argument("--data-dir", type=Path, help="the server's data directory")
    im.add_argument("--config", type=Path, help="TOML configuration file")
    im.add_argument(
        "--governance-jwks",
        type=Path,
        action="append",
        help="JWKS file of trusted governance-platform keys (repeatable)",
    )
    im.add_argument("--batch", type=int, default=2000, help="agents stored per transaction")
    im.add_argument("--workers", type=int, help="verification processes (default: CPU count)")
    im.add_argument("--strict", action="store_true", help="exit 1 when any line is refused")
    im.add_argument("--refusals", type=int, default=20, help="refused lines to print (default 20)")

    d = sub.add_parser("discover", help="send DISCOVER and print a verified, ranked table")
    d.add_argument("intent", help="natural-language description of the needed capability")
    _add_identity(d, "discovery:query")
    d.add_argument("--trust-tier-min", type=int)
    d.add_argument("--behavioral-trust-min", type=float)
    d.add_argument("--zone", dest="governance_zone")
    d.add_argument("--org-domain")
    d.add_argument("--limit", type=int)
    d.add_argument("--domains", help="capability_domains, comma-separated (e.g. tools,examples)")
    d.add_argument("--scope-negotiate", action="store_true")
    d.add_argument(
        "--prefer",
        dest="preferred_agent",
        metavar="CANONICAL_ID",
        help="preferred_agent: route to this agent, or to its most equivalent alternative",
    )
    d.add_argument("--json", action="store_true", help="print the full response body")

    a = sub.add_parser("activate", help="register a signed manifest through ACTIVATE")
    a.add_argument(
        "manifest",
        type=Path,
        help='JSON file: a signed manifest, or {"manifest": ..., "capabilities": ...}',
    )
    a.add_argument("--capabilities", type=Path, help="JSON file with the Capability Document")
    _add_identity(a, "discovery:register")

    g = sub.add_parser("governance", help="act as a governance platform")
    gsub = g.add_subparsers(dest="gov_command", required=True)
    k = gsub.add_parser("keygen", help="generate an ES256 governance key and its public JWKS")
    k.add_argument("--key", type=Path, required=True, help="private key PEM to write (mode 0600)")
    k.add_argument("--jwks", type=Path, help="public JWKS to write (default KEY with .jwks.json)")
    k.add_argument("--kid", help="key id (default: RFC 7638 thumbprint)")
    sm = gsub.add_parser("sign-manifest", help="sign an Agent Manifest Document (JCS + ES256)")
    sm.add_argument(
        "manifest",
        type=Path,
        help='JSON file: a manifest, or {"manifest": ..., "capabilities": ...}',
    )
    sm.add_argument("--key", type=Path, required=True)
    sm.add_argument("--kid", help="key id, if the JWKS used a custom one")
    sm.add_argument("--out", type=Path, help="output file (default stdout)")

    lc = sub.add_parser(
        "lifecycle",
        help="send a governance-signed lifecycle event (suspend, revoke, deprecate, reinstate)",
    )
    lc.add_argument("event", choices=["suspend", "revoke", "deprecate", "reinstate"])
    lc.add_argument("canonical_id", help="the agent's canonical id")
    lc.add_argument("--governance-key", type=Path, required=True, help="governance private key PEM")
    lc.add_argument("--kid", help="key id, if the JWKS used a custom one")
    lc.add_argument("--reason", help="reason code or text (kept in the audit log)")
    lc.add_argument("--successor", help="successor_agent canonical id (deprecate only)")
    lc.add_argument("--event-id", help="event id (default: a fresh random one)")
    _add_identity(lc, "discovery:register")

    pe = sub.add_parser("peers", help="federation peer tools")
    pesub = pe.add_subparsers(dest="peers_command", required=True)
    pc = pesub.add_parser(
        "check",
        help="ask every configured peer once, as a federated DISCOVER would "
        "(key, answer, signature); exit 0 only if all of them pass",
    )
    pc.add_argument("--config", type=Path, help="TOML configuration file ([federation] peers)")
    pc.add_argument(
        "--peer",
        action="append",
        metavar="TIER@URL",
        help="a peer as for ans serve --peer (repeatable; replaces the file's peers)",
    )
    pc.add_argument("--intent", default=None, help="the probe's intent (default: a fixed text)")
    pc.add_argument(
        "--agent-id", default="agtp://localhost/agents/ans-peers-check", help="Agent-ID header"
    )
    pc.add_argument("--principal-id", default=None, help="Principal-ID header (default: $USER)")
    pc.add_argument("--scope", default="discovery:query", help="Authority-Scope header")
    pc.add_argument("--json", action="store_true", help="one JSON object per peer, as a list")

    au = sub.add_parser("audit", help="audit log tools")
    ausub = au.add_subparsers(dest="audit_command", required=True)
    av = ausub.add_parser("verify", help="check the audit log's hash chain (exit 0 only if intact)")
    av.add_argument("--data-dir", type=Path, default=Path("ans-data"))
    av.add_argument("--file", type=Path, help="audit log path (default DATA_DIR/audit.jsonl)")
    return ap


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
    if args.command == "activate":
        return cmd_activate(args)
    if args.command == "lifecycle":
        return cmd_lifecycle(args)
    if args.command == "audit":
        return cmd_audit_verify(args)
    if args.command == "peers":
        return cmd_peers_check(args)
    if args.command == "governance" and args.gov_command == "keygen":
        return cmd_keygen(args)
    return cmd_sign(args)


# -- serve ---------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    from ans.federation.peers import PeerConfigError, parse_peer_flag

    from . import config as config_mod
    from .preflight import check_serve
    from .server import build_service, configure_logging, serve_forever

    try:
        peers = tuple(parse_peer_flag(p) for p in args.peer or ())
    except PeerConfigError as exc:
        raise ConfigError(str(exc)) from None
    cfg = config_mod.load(
        args.config,
        listen=args.listen,
        native_listen=args.native_listen,
        data_dir=args.data_dir,
        governance_jwks=tuple(args.governance_jwks) if args.governance_jwks else None,
        demo=args.demo,
        log_format=args.log_format,
        log_level=args.log_level,
        peers=peers or None,
    )
    check_serve(cfg)  # a wrong path, file or port is one line, before any start-up work
    from . import drain
    from .http2_defences import UnsupportedHypercorn

    try:
        drain.install()  # the HTTP/2 defences: only on the hypercorn they were written for
    except UnsupportedHypercorn as exc:
        print(f"ans: {exc}", file=sys.stderr)
        return 2
    configure_logging(cfg.log_level, cfg.log_format)
    built = build_service(cfg)
    if built.demo_key is not None:
        from .demo import activate_demo

        n = activate_demo(built.service, built.demo_key)
        print(
            f"ANS demo catalog: {n} agents activated (demo governance kid {built.demo_key.kid})",
            flush=True,
        )
    serve_forever(built.service, cfg, gate=built.gate, freshness=built.freshness, lock=built.lock)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """Exit 0 when at least one line was imported (or was already there,
    unchanged) and nothing crashed; 1 when no line was accepted, or with
    --strict any refused; 2 on usage errors (bad flags, unreadable files,
    data directory in use)."""
    from . import config as config_mod
    from .importer import import_files
    from .preflight import check_data_dir
    from .server import configure_logging

    if args.batch < 1 or (args.workers is not None and args.workers < 1):
        raise ConfigError("--batch and --workers must be at least 1")
    for f in args.files:
        if not f.is_file():
            raise ConfigError(f"no such file: {f}")
    cfg = config_mod.load(
        args.config,
        data_dir=args.data_dir,
        governance_jwks=tuple(args.governance_jwks) if args.governance_jwks else None,
    )
    check_data_dir(cfg.data_dir)  # a mistyped --data-dir must not become a fresh registry
    configure_logging("warning", cfg.log_format)
    report = import_files(cfg, args.files, batch=args.batch, workers=args.workers)
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


# -- discover / activate ----------------------------------------------------------------


def _ask(
    args: argparse.Namespace, method: str, params: dict[str, Any], *, keys: bool = False
) -> tuple[Any, dict[str, Any] | None] | None:
    """(response, the server's JWKS when ``keys`` and the call succeeded), or
    None after printing why the server could not be asked."""
    import httpx

    try:
        with _client(args) as client:
            resp = client.call(method, params, task_id=_task_id(method))
            jwks = client.jwks() if keys else None
    except (ValueError, httpx.InvalidURL) as exc:
        print(f"ans: --server {args.server}: {exc}", file=sys.stderr)
        return None
    except (httpx.HTTPError, OSError) as exc:  # OSError: the native client
        print(f"ans: cannot reach {args.server}: {exc}", file=sys.stderr)
        return None
    return resp, jwks


def _task_id(method: str) -> str:
    return f"task-cli-{method.lower()}"


def _client(args: argparse.Namespace) -> Any:
    from .client import connect

    return connect(
        args.server,
        agent_id=args.agent_id,
        principal_id=args.principal_id or getpass.getuser() or "cli-user",
        scope=args.scope,
        timeout=args.timeout,
        verify=args.cacert or True,
    )


def _print_error(resp: Any) -> int:
    err = resp.error or {}
    print(f"ans: {resp.status} {err.get('code', '?')}: {err.get('message', '')}", file=sys.stderr)
    return 2


def cmd_discover(args: argparse.Namespace) -> int:
    from ans.governance.keys import KeyFileError
    from ans.protocol.errors import AgtpError

    from .client import verify_discover_answer

    params: dict[str, Any] = {"intent": args.intent}
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


def _print_rows(rows: list[list[str]]) -> None:
    """Left-aligned columns, two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


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
            f"{r['capability_match_score']:.3f}",
            f"{r.get('rank_score', 0):.3f}",
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


# -- peers check ----------------------------------------------------------------------


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

    from . import config as config_mod
    from .server import configure_logging, peer_transport
    from .service import utc_now

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


def _read_json(path: Path) -> Any:
    """A JSON file, strictly parsed; a ValueError naming it when it is not
    (empty, not UTF-8, a duplicate key, ...)."""
    from ans.protocol import jsonstrict
    from ans.protocol.errors import AgtpError

    data = path.read_bytes()
    if not data.strip():
        raise ValueError(f"{path}: the file is empty; a JSON document is expected")
    try:
        return jsonstrict.loads(data, max_bytes=4 * 1024 * 1024)
    except AgtpError as exc:
        raise ValueError(f"{path}: not valid JSON: {exc.message}") from None


def _read_key(path: Path, kid: str | None) -> Any:
    """A governance private key (PEM); a ValueError naming the file."""
    from ans.governance.keys import KeyFileError, SigningKey

    try:
        return SigningKey.from_pem(path.read_bytes(), kid)
    except KeyFileError as exc:
        raise ValueError(f"{path}: {exc}") from None


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


# -- governance helpers --------------------------------------------------------------------


def cmd_keygen(args: argparse.Namespace) -> int:
    from ans.governance.keys import SigningKey

    if args.key.exists():
        print(f"ans: {args.key} exists; refusing to overwrite a key", file=sys.stderr)
        return 2
    key = SigningKey.generate(args.kid)
    key.save(args.key)
    jwks_path = args.jwks or args.key.with_suffix(".jwks.json")
    jwks_path.write_text(json.dumps({"keys": [key.public.jwk()]}, indent=2) + "\n")
    print(f"kid {key.kid}\nprivate key {args.key} (0600)\npublic JWKS {jwks_path}")
    return 0


def cmd_sign(args: argparse.Namespace) -> int:
    from ans.governance.signing import sign_document

    key = _read_key(args.key, args.kid)
    doc = _read_json(args.manifest)
    if isinstance(doc, dict) and isinstance(doc.get("manifest"), dict):
        out: Any = {**doc, "manifest": sign_document(doc["manifest"], key, "signature")}
    elif isinstance(doc, dict):
        out = sign_document(doc, key, "signature")
    else:
        print("ans: the manifest file must hold a JSON object", file=sys.stderr)
        return 2
    text = json.dumps(out, indent=2, ensure_ascii=False) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
