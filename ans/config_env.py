"""Configuration from the environment, and the effective configuration shown.

Every key of the TOML file can also be set by an environment variable named
``ANS_<SECTION>__<KEY>`` (upper case; ``__`` separates the section, the key
and any sub-table): ``ANS_SERVER__LISTEN=0.0.0.0:4480``,
``ANS_DISCOVERY__MIN_RELEVANCE=0.01``, ``ANS_RATE_LIMIT__ENABLED=false``,
``ANS_FEDERATION__PEERS='[{url = "https://peer.example", tier = 2}]'``.

A value is read as a TOML value when it is one (``true``, ``0.5``, ``[...]``,
``"quoted"``) and as a plain string otherwise (``127.0.0.1:4480``, a path).
Precedence: command-line flags > environment > file > defaults
(:func:`ans.config.load`). A variable naming an unknown section or key is a
configuration error, as it is in the file. Variables without ``__``
(``ANS_SERVER``, the client's default server URL) are not configuration.

:func:`show` renders the effective configuration as TOML, each value with
where it came from, secrets redacted (``ans config show``).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

PREFIX = "ANS_"
SEP = "__"
MAX_VALUE = 64 * 1024  # bytes of one variable's value
# Key names whose values are never printed.
_SECRET = re.compile(r"(secret|password|passwd|private|credential)", re.IGNORECASE)


class EnvError(ValueError):
    """A malformed configuration variable (the CLI reports it as a config error)."""


def parse_value(raw: str) -> Any:
    """A TOML value if ``raw`` is one, else the string itself."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def env_table(environ: Mapping[str, str]) -> dict[str, Any]:
    """The configuration variables of ``environ`` as a TOML document
    (sections and sub-tables as nested dicts), plus the variable each value
    came from under the key ``"__origin__"`` of its table."""
    doc: dict[str, Any] = {}
    for name in sorted(environ):
        if not name.startswith(PREFIX) or SEP not in name:
            continue
        parts = name[len(PREFIX) :].lower().split(SEP)
        if any(not p for p in parts) or len(parts) < 2:
            raise EnvError(f"{name}: expected {PREFIX}<SECTION>{SEP}<KEY>")
        raw = environ[name]
        if len(raw) > MAX_VALUE:
            raise EnvError(f"{name}: value longer than {MAX_VALUE} bytes")
        table = doc
        for part in parts[:-1]:
            nxt = table.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise EnvError(f"{name}: {part} is both a value and a table")
            table = nxt
        table[parts[-1]] = parse_value(raw)
        table.setdefault("__origin__", {})[parts[-1]] = name
    return doc


def strip_origins(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` without the ``__origin__`` bookkeeping."""
    return {
        k: strip_origins(v) if isinstance(v, dict) else v
        for k, v in doc.items()
        if k != "__origin__"
    }


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` laid on ``base`` key by key (tables merged, values replaced)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def redact(key: str, value: Any) -> Any:
    """``value`` as it may be printed: secrets hidden, passwords cut out of URLs."""
    if _SECRET.search(key) and value not in ("", None, ()):
        return "<redacted>"
    if isinstance(value, str) and "://" in value and "@" in value:
        parts = urlsplit(value)
        if parts.password:
            netloc = f"{parts.username}:<redacted>@{parts.hostname}"
            if parts.port:
                netloc += f":{parts.port}"
            return urlunsplit(parts._replace(netloc=netloc))
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None:
        return ""
    return value if isinstance(value, (str, int, float, bool)) else str(value)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return _toml(str(value))


def show(
    cfg: Any,
    sections: Mapping[str, set[str]],
    renamed: Mapping[tuple[str, str], str],
    tables: Mapping[str, str],
    origin: Mapping[tuple[str, str], str],
) -> str:
    """The effective configuration ``cfg`` as TOML: every key of ``sections``
    (``renamed`` maps a (section, key) to its Config field), then each
    dataclass-valued field of ``tables`` (section -> Config field) as its own
    table; ``origin`` tells where a (section, key) was set (file, env var,
    flag) — the rest are defaults."""
    lines: list[str] = []
    for section in sorted(sections):
        lines.append(f"[{section}]")
        for key in sorted(sections[section]):
            name = renamed.get((section, key), key)
            value = redact(key, _plain(getattr(cfg, name)))
            where = origin.get((section, key), "default")
            lines.append(f"{key} = {_toml(value)}  # {where}")
        lines.append("")
    for section, name in sorted(tables.items()):
        lines.append(f"[{section}]")
        body = _plain(getattr(cfg, name))
        if isinstance(body, dict):
            for key, value in body.items():
                where = origin.get((section, key), "default")
                lines.append(f"{key} = {_toml(redact(key, value))}  # {where}")
        lines.append("")
    for peer in _plain(list(getattr(cfg, "peers", ()))):
        lines.append("[[federation.peers]]  # " + origin.get(("federation", "peers"), "flag"))
        lines += [f"{k} = {_toml(redact(k, v))}" for k, v in peer.items()]
        lines.append("")
    return "\n".join(lines)
