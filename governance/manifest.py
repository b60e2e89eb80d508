"""Agent Manifest Document (-02 6.4) and DESCRIBE Capability Document
validation, and verification of the governance platform's signature.

A manifest is accepted only if every required field is present with the
right type, the signature verifies against a trusted governance key, and
``lifecycle_state`` is ``Active``. Unknown fields are kept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ans.protocol.errors import AgentNotActive, ErrorCode, InvalidCapabilities, InvalidManifest
from ans.protocol.jcs import unsafe_integer
from ans.protocol.messages import ORG_DOMAIN_RE, ZONE_RE
from ans.protocol.scope import parse_token

from .profile_metadata import validate_profile_fields
from .signing import KeyLookup, verify_document

MAX_TEXT = 4000
MAX_SHORT = 512
MAX_LIST = 64
MAX_EXAMPLES = 64
MAX_EXAMPLE_TEXT = 2000  # same bound as a DISCOVER intent

_LABEL_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
_METHOD_RE = re.compile(r"[A-Z][A-Z0-9_-]{0,31}")
_CANONICAL_RE = re.compile(r"[A-Za-z0-9._:-]{1,256}")
_ENDPOINT_RE = re.compile(r"https?://[A-Za-z0-9.\[\]:-]+(?:/[^\s?#]*)?")
TIER2_FIELDS = ("trust_warning", "trust_tier_explanation")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _str(v: Any, max_len: int = MAX_SHORT) -> bool:
    return isinstance(v, str) and 0 < len(v) <= max_len


def _timestamp(v: Any) -> bool:
    if not _str(v, 64):
        return False
    try:
        datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _str_list(v: Any, pattern: re.Pattern[str] | None = None, max_len: int = MAX_SHORT) -> bool:
    return (
        isinstance(v, list)
        and len(v) <= MAX_LIST
        and all(_str(x, max_len) and (pattern is None or pattern.fullmatch(x)) for x in v)
    )


def _scope_list(v: Any) -> bool:
    if not _str_list(v, max_len=130):
        return False
    try:
        for token in v:
            parse_token(token)
    except Exception:
        return False
    return True


# field -> (check, description for the error message)
REQUIRED_FIELDS: dict[str, tuple[Any, str]] = {
    "document_type": (lambda v: v == "agtp-manifest", "the string 'agtp-manifest'"),
    "schema_version": (lambda v: _str(v, 32), "a version string"),
    "manifest_uri": (lambda v: _str(v) and v.startswith("agtp://"), "an agtp:// URI"),
    "canonical_id": (lambda v: isinstance(v, str) and _CANONICAL_RE.fullmatch(v), "an identifier"),
    "agent_label": (lambda v: isinstance(v, str) and _LABEL_RE.fullmatch(v), "a lowercase label"),
    "org_domain": (
        lambda v: isinstance(v, str) and len(v) <= 253 and ORG_DOMAIN_RE.fullmatch(v),
        "a lowercase DNS domain",
    ),
    "governance_zone": (
        lambda v: isinstance(v, str) and ZONE_RE.fullmatch(v),
        "a zone id like 'zone:finance'",
    ),
    "trust_tier": (lambda v: _is_int(v) and v in (1, 2, 3), "the integer 1, 2 or 3"),
    "package_format": (lambda v: _str(v, 32), "a string"),
    "package_integrity_hash": (lambda v: _str(v, 256), "a string"),
    "lifecycle_state": (lambda v: _str(v, 32), "a lifecycle state"),
    "cert_status": (lambda v: _str(v, 32), "a string"),
    "principal_org": (lambda v: _str(v), "a string"),
    "activated_at": (_timestamp, "an RFC 3339 timestamp"),
    "behavioral_trust_score": (
        lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0,
        "a number from 0.0 to 1.0",
    ),
    "authority_scope_categories": (_scope_list, "a list of scope tokens"),
    "supported_methods": (
        lambda v: _str_list(v, _METHOD_RE, 32),
        "a list of uppercase method names",
    ),
    "job_description": (lambda v: _str(v, MAX_TEXT), f"a string of at most {MAX_TEXT} characters"),
    "signature": (lambda v: isinstance(v, dict), "a signature object"),
}


def manifest_problems(
    manifest: Mapping[str, Any], skip: frozenset[str] = frozenset()
) -> tuple[list[str], list[str]]:
    """Every missing and every malformed field of ``manifest`` (field names in
    ``skip`` are not checked): (missing, malformed descriptions)."""
    missing: list[str] = []
    malformed: list[str] = []
    for name, (check, what) in REQUIRED_FIELDS.items():
        if name in skip:
            continue
        if name not in manifest:
            missing.append(name)
        elif not check(manifest[name]):
            malformed.append(f"{name!r} must be {what}")
    if manifest.get("trust_tier") == 2:
        missing += [n for n in TIER2_FIELDS if n not in manifest]
        bad = [n for n in TIER2_FIELDS if n in manifest and not _str(manifest[n])]
        malformed += [f"{n!r} must be a string" for n in bad]
    for name in ("version", "last_updated"):
        if name in manifest and not (
            _timestamp(manifest[name]) if name == "last_updated" else _str(manifest[name], 64)
        ):
            malformed.append(f"{name!r} is malformed")
    return missing, malformed


def describe_problems(missing: list[str], malformed: list[str], limit: int = 12) -> str:
    """One bounded sentence naming every problem (at most ``limit`` of each kind)."""

    def cut(items: list[str]) -> str:
        more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
        return ", ".join(items[:limit]) + more

    parts = []
    if missing:
        kind = "field" if len(missing) == 1 else "fields"
        parts.append(f"manifest is missing required {kind} {cut([repr(m) for m in missing])}")
    if malformed:
        parts.append(f"manifest field {cut(malformed)}")
    return "; ".join(parts)


def validate_manifest_fields(manifest: Mapping[str, Any]) -> None:
    """Raise InvalidManifest (422) naming every missing or mistyped field at
    once (``manifest_missing_field`` when any is missing)."""
    missing, malformed = manifest_problems(manifest)
    if missing:
        raise InvalidManifest(
            describe_problems(missing, malformed), code=ErrorCode.MANIFEST_MISSING_FIELD
        )
    if malformed:
        raise InvalidManifest(
            describe_problems(missing, malformed), code=ErrorCode.MANIFEST_FIELD_TYPE
        )


@dataclass(frozen=True, slots=True)
class VerifiedManifest:
    manifest: dict[str, Any]
    signer_kid: str


def verify_manifest(manifest: dict[str, Any], trusted: KeyLookup) -> VerifiedManifest:
    """Fields, then governance signature, then lifecycle Active."""
    validate_manifest_fields(manifest)
    kid = verify_document(manifest, trusted, "signature")
    if manifest["lifecycle_state"] != "Active":
        raise AgentNotActive(
            f"lifecycle_state is {manifest['lifecycle_state'][:32]!r}; "
            "only Active agents are indexed"
        )
    return VerifiedManifest(manifest, kid)


# -- Capability Document ---------------------------------------------------------


def _tool_names(v: Any) -> bool:
    if not isinstance(v, list) or len(v) > MAX_LIST:
        return False
    for t in v:
        if isinstance(t, dict):
            if not _str(t.get("name")) or (
                "description" in t and not _str(t["description"], MAX_EXAMPLE_TEXT)
            ):
                return False
        elif not _str(t):
            return False
    return True


CAPABILITY_FIELDS: dict[str, tuple[Any, str]] = {
    "supported_methods": (
        lambda v: _str_list(v, _METHOD_RE, 32),
        "a list of uppercase method names",
    ),
    "modalities": (lambda v: _str_list(v, max_len=64), "a list of strings"),
    "tools": (_tool_names, "a list of tool names (or {name, description} objects)"),
    "zones_accepted": (lambda v: _str_list(v, ZONE_RE, 128), "a list of zone ids"),
    "version": (lambda v: _str(v, 64), "a string"),
    "tags": (lambda v: _str_list(v, max_len=64), "a list of short strings"),
    "required_scope": (
        lambda v: isinstance(v, str) and len(v) <= 1024 and all(parse_token(t) for t in v.split()),
        "a space-separated scope string",
    ),
    # Index freshness (ans.freshness_policy): where the agent answers DESCRIBE and
    # /status when that is not its manifest_uri, and its session capacity.
    "endpoint": (
        lambda v: isinstance(v, str) and len(v) <= 2048 and _ENDPOINT_RE.fullmatch(v),
        "an http(s) URL without credentials, query or fragment",
    ),
    "max_sessions": (
        lambda v: _is_int(v) and 1 <= v <= 1_000_000_000,
        "a positive integer",
    ),
}


def validate_capabilities(caps: Mapping[str, Any]) -> None:
    """Raise InvalidCapabilities (422) for a malformed Capability Document."""
    for name, (check, what) in CAPABILITY_FIELDS.items():
        if name in caps:
            try:
                ok = check(caps[name])
            except Exception:
                ok = False
            if not ok:
                raise InvalidCapabilities(f"capabilities.{name} must be {what}")
    examples = caps.get("examples")
    if examples is not None:
        if not isinstance(examples, list) or len(examples) > MAX_EXAMPLES:
            raise InvalidCapabilities(
                f"capabilities.examples must be a list of at most {MAX_EXAMPLES}"
            )
        seen: set[str] = set()
        for i, ex in enumerate(examples):
            if not isinstance(ex, dict) or not _str(ex.get("text"), MAX_EXAMPLE_TEXT):
                raise InvalidCapabilities(
                    f"capabilities.examples[{i}] needs a 'text' of 1..{MAX_EXAMPLE_TEXT} characters"
                )
            ex_id = ex.get("id", f"ex-{i + 1}")
            if not _str(ex_id, 128) or ex_id in seen:
                raise InvalidCapabilities(f"capabilities.examples[{i}].id must be a unique string")
            seen.add(ex_id)
    validate_profile_fields(caps)  # the efficient-discovery profile's fields
    # every answer that carries the document is signed over its RFC 8785 form
    where = unsafe_integer(caps)
    if where is not None:
        raise InvalidCapabilities(
            f"capabilities{where if where != '.' else ''}: an integer outside ±2^53 "
            "cannot be canonicalized (RFC 8785, I-JSON)"
        )
