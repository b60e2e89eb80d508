"""The ``ans`` argument parser: every command, its flags and their help."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import NoReturn

from .. import __version__
from .mcp import add_mcp_parser

DEFAULT_SERVER = "http://127.0.0.1:4480"


def finite_float(text: str) -> float:
    """An argument that is a finite number (``float`` also takes nan and inf,
    which JSON cannot carry)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line on stderr, naming the command and its --help
    (argparse prints the whole usage first), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def timeout_seconds(text: str) -> float:
    """A timeout: a finite number of seconds above 0, at most an hour."""
    value = finite_float(text)
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is not from above 0 to 3600 seconds")
    return value


def readable_file(text: str) -> str:
    """A file that exists and can be read (a CA bundle: its absence named here,
    not as a connection failure to the server)."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text[:200]!r} is not a file")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{text[:200]!r} cannot be read")
    return text


def _add_identity(p: argparse.ArgumentParser, scope: str) -> None:
    p.add_argument(
        "--server",
        default=os.environ.get("ANS_SERVER", DEFAULT_SERVER),
        help=f"ANS base URL (default {DEFAULT_SERVER}; env ANS_SERVER); "
        "agtp[+cleartext]://HOST:PORT speaks the native framing to a --native-listen",
    )
    p.add_argument("--agent-id", default="agtp://localhost/agents/ans-cli", help="Agent-ID header")
    p.add_argument(
        "--principal-id",
        default=None,
        help="Principal-ID header, Owner-ID in the newer dialect (default: $USER)",
    )
    p.add_argument("--scope", default=scope, help=f"Authority-Scope header (default {scope!r})")
    p.add_argument(
        "--cacert", type=readable_file, default=None, help="CA bundle for https and agtp servers"
    )
    p.add_argument("--timeout", type=timeout_seconds, default=10.0, help="seconds")


def _parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="ans", description="ANS, the AGTP Agent Name Service")
    ap.add_argument("--version", action="version", version=f"ans {__version__}")
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
        "--store",
        metavar="PATH|URL",
        help="the registry store: a SQLite file (default DATA-DIR/registry.sqlite3) or "
        "postgresql://... shared by several ANS nodes",
    )
    s.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="worker processes on the same listeners (default [server] workers, else one "
        "per core; 1: a single process)",
    )
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
    im.add_argument("--store", metavar="PATH|URL", help="the registry store (as ans serve)")
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
    im.add_argument(
        "--server",
        help="import into a RUNNING server at this URL (one ACTIVATE per line over HTTP/2, "
        "retried after 429/503) instead of the data directory; e.g. http://127.0.0.1:4480",
    )
    im.add_argument(
        "--agent-id",
        default="agtp://localhost/agents/ans-import",
        help="with --server: the governance Agent-ID sending the ACTIVATEs",
    )
    im.add_argument("--principal-id", default=None, help="with --server (default: $USER)")
    im.add_argument("--scope", default="discovery:register", help="with --server: Authority-Scope")
    im.add_argument(
        "--concurrency", type=int, default=16, help="with --server: ACTIVATEs in flight"
    )
    im.add_argument(
        "--cacert", type=readable_file, default=None, help="with --server: CA bundle for https"
    )

    ic = sub.add_parser(
        "import-cards",
        help="register HAIDIP / A2A agent cards as self-asserted tier-3 records",
    )
    ic.add_argument(
        "path",
        type=Path,
        metavar="PATH",
        help="a card file (one JSON object, or an array of them) or a directory of *.json cards",
    )
    ic.add_argument("--data-dir", type=Path, help="the server's data directory")
    ic.add_argument("--store", metavar="PATH|URL", help="the registry store (as ans serve)")
    ic.add_argument("--config", type=Path, help="TOML configuration file")
    ic.add_argument("--zone", help="governance zone of the records (default zone:public)")
    ic.add_argument(
        "--principal-id", default=None, help="the principal owning the records (default: $USER)"
    )
    ic.add_argument("--strict", action="store_true", help="exit 1 when any card is refused")
    ic.add_argument("--quiet", action="store_true", help="no line per card, only the summary")

    d = sub.add_parser("discover", help="send DISCOVER and print a verified, ranked table")
    d.add_argument(
        "intent", nargs="?", help="natural-language description of the needed capability"
    )
    _add_identity(d, "discovery:query")
    d.add_argument(
        "--dialect",
        choices=["agtp-02", "agtp-09"],
        default="agtp-02",
        help="wire dialect: agtp-02 (default) or agtp-09, the newer drafts' "
        "(Owner-ID, comma scopes, application/vnd.agtp+json)",
    )
    d.add_argument(
        "--name",
        help="resolve a name (label.org_domain, an explicit manifest name, or an agtp:// URI)",
    )
    d.add_argument("--trust-tier-min", type=int)
    d.add_argument("--behavioral-trust-min", type=finite_float)
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
    pc.add_argument(
        "--principal-id",
        default=None,
        help="Principal-ID header, Owner-ID in the newer dialect (default: $USER)",
    )
    pc.add_argument("--scope", default="discovery:query", help="Authority-Scope header")
    pc.add_argument("--json", action="store_true", help="one JSON object per peer, as a list")

    au = sub.add_parser("audit", help="audit log tools")
    ausub = au.add_subparsers(dest="audit_command", required=True)
    av = ausub.add_parser("verify", help="check the audit log's hash chain (exit 0 only if intact)")
    av.add_argument("--data-dir", type=Path, default=Path("ans-data"))
    av.add_argument(
        "--file",
        type=Path,
        help="one audit log (default: every log in DATA_DIR: audit.jsonl, audit-worker-N.jsonl)",
    )
    bk = sub.add_parser(
        "backup",
        help="back the data directory up into a new directory, while the server runs",
        description="Copies the registry with SQLite's online backup API and every other "
        "file of the data directory (keys, audit log, index snapshot), with backup.json "
        "(sizes, SHA-256). For a PostgreSQL store use pg_dump (docs/operations.md, Backups).",
    )
    bk.add_argument("target", type=Path, help="new (or empty) directory for the backup")
    bk.add_argument("--data-dir", type=Path, default=Path("ans-data"), help="(default ans-data)")
    rs = sub.add_parser(
        "restore",
        help="restore a backup into a new, empty data directory (checks it first)",
    )
    rs.add_argument("source", type=Path, help="a directory written by ans backup")
    rs.add_argument("--data-dir", type=Path, required=True, help="new or empty data directory")

    ak = sub.add_parser("apikey", help="API keys for [[auth.api_keys]]")
    aksub = ak.add_subparsers(dest="apikey_command", required=True)
    an = aksub.add_parser(
        "new",
        help="generate an API key: prints the key once and its [[auth.api_keys]] entry (hash only)",
    )
    an.add_argument("--principal", required=True, help="the Principal-ID the key authenticates as")
    an.add_argument(
        "--scope",
        action="append",
        default=[],
        help="a scope token the key grants, e.g. agents:invoke (repeatable)",
    )
    an.add_argument(
        "--zone",
        action="append",
        default=[],
        help="a restricted zone the key may see, e.g. zone:finance (repeatable)",
    )
    an.add_argument(
        "--agent-id",
        default=None,
        help="bind the key to this Agent-ID (default: any Agent-ID header; "
        "apikey:<principal> when the request sends none)",
    )
    cf = sub.add_parser(
        "config",
        help="configuration tools",
        description="Every [section] key of the TOML file can also be set by the environment "
        "variable ANS_<SECTION>__<KEY> (e.g. ANS_SERVER__LISTEN=0.0.0.0:4480). "
        "Precedence: flags > environment > file > defaults.",
    )
    cfsub = cf.add_subparsers(dest="config_command", required=True)
    cs = cfsub.add_parser(
        "show",
        help="print the effective configuration as TOML, each value with where it came from "
        "(secrets redacted)",
    )
    cs.add_argument("--config", type=Path, help="TOML configuration file")
    add_mcp_parser(sub)
    _polish(ap)
    return ap


# Help for options declared without one: (command path, dest) -> text.
_HELP = {
    (
        "serve",
        "log_format",
    ): "operational log format on stderr (console, or one JSON object a line)",
    ("serve", "log_level"): "least level of the operational log",
    ("*", "timeout"): "seconds to wait for the answer",
    ("discover", "trust_tier_min"): "admit trust tiers 1..N (default: 1-2; 3 only when asked)",
    ("discover", "behavioral_trust_min"): "least behavioral_trust_score (0.0-1.0)",
    ("discover", "governance_zone"): "only agents in this zone, e.g. zone:finance",
    ("discover", "org_domain"): "only agents of this organisation domain",
    ("discover", "limit"): "results to return (server default 10, at most max_limit)",
    ("discover", "scope_negotiate"): "add each agent's required_scope to its result",
    ("lifecycle", "event"): "the lifecycle event to send",
    ("governance sign-manifest", "key"): "governance private key PEM (ans governance keygen)",
    ("audit verify", "data_dir"): "the server's data directory",
}

# Examples shown at the end of each command's --help.
_EXAMPLES = {
    "serve": [
        "ans serve --demo                                   # demo catalog on 127.0.0.1:4480",
        "ans serve --data-dir /var/lib/ans --governance-jwks gov.jwks.json",
        "ANS_SERVER__LISTEN=0.0.0.0:4480 ans serve --config ans.toml",
    ],
    "import": [
        "ans import agents.jsonl --data-dir ans-data --governance-jwks gov.jwks.json",
        "ans import agents.jsonl --server http://127.0.0.1:4480   # into a running server",
    ],
    "import-cards": [
        "ans import-cards cards/ --data-dir ans-data",
        "ans import-cards partner-agents.json --data-dir ans-data --zone zone:partners",
    ],
    "discover": [
        'ans discover "audit Solidity smart contracts" --trust-tier-min 2 --limit 5',
        'ans discover "translate a contract" --json --server https://ans.example:4480',
    ],
    "activate": ["ans activate signed.json --server http://127.0.0.1:4480"],
    "governance keygen": ["ans governance keygen --key gov.pem   # also writes gov.jwks.json"],
    "governance sign-manifest": [
        "ans governance sign-manifest examples/agent.json --key gov.pem --out signed.json"
    ],
    "lifecycle": [
        "ans lifecycle revoke CANONICAL_ID --governance-key gov.pem --reason compromised"
    ],
    "peers check": [
        "ans peers check --config ans.toml",
        "ans peers check --peer 2@http://peer:4480",
    ],
    "audit verify": ["ans audit verify --data-dir ans-data"],
    "backup": ["ans backup /backups/ans-2026-11-25 --data-dir ans-data"],
    "restore": ["ans restore /backups/ans-2026-11-25 --data-dir ans-data-restored"],
    "apikey new": [
        "ans apikey new --principal usr-alice --scope agents:invoke --scope discovery:query"
    ],
    "config show": ["ANS_DISCOVERY__MIN_RELEVANCE=0.01 ans config show --config ans.toml"],
}


class _Help(argparse.RawDescriptionHelpFormatter):
    """Every option's default is shown, unless its help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" not in text
            and default not in (None, False, argparse.SUPPRESS)
            and action.option_strings
            and not isinstance(action, argparse._StoreTrueAction)
        ):
            text += " (default: %(default)s)"
        return text


def _subparsers(
    ap: argparse.ArgumentParser, path: str = ""
) -> list[tuple[str, argparse.ArgumentParser]]:
    out = []
    for action in ap._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                full = f"{path} {name}".strip()
                out.append((full, sub))
                out += _subparsers(sub, full)
    return out


def _polish(ap: argparse.ArgumentParser) -> None:
    """Help with defaults and examples on every command."""
    ap.formatter_class = _Help
    for path, sub in _subparsers(ap):
        sub.formatter_class = _Help
        for action in sub._actions:
            if action.help is None and action.dest != "help":
                action.help = _HELP.get((path, action.dest)) or _HELP.get(("*", action.dest))
        examples = _EXAMPLES.get(path)
        if examples:
            sub.epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
