"""The efficient-discovery profile's agent metadata (draft-xu section 4) inside
a DESCRIBE Capability Document: validation of its fields, and what the index
derives from them.

A capability document may carry the profile's fields at its top level
(``id``, ``name``, ``description``, ``tags``, ``examples``, ``bindings``,
``auth``, ``constraints``, ``status``, ``expires_at``, ``version``,
``updated_at``, ``signature``); a section-13.1 D0 object *is* a valid
capability document. Unknown fields, top-level and nested, are kept verbatim
(the store holds the document as sent). Validation only bounds and types the
fields ANS reads.

What the index derives (:func:`attrs_of`): the normalized tags, the binding
protocols, the declared regions, ``expires_at`` and the metadata's
``updated_at`` (as epoch seconds). The bindings an agent is returned with
(:func:`bindings_of`) are the declared ones, else one implicit AGTP binding at
its ``manifest_uri`` (every governed agent answers AGTP there).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ans.protocol.errors import InvalidCapabilities
from ans.protocol.jcs import canonicalize
from ans.protocol.profile_params import normalize_tag
from ans.protocol.request_types import ProfileParams

MAX_BINDINGS = 16
MAX_MEDIA_TYPES = 16
MAX_OBJECT_BYTES = 4096  # auth, constraints: their JCS bytes
MAX_REGIONS = 16
STATUSES = ("active", "inactive", "suspended", "deprecated", "testing")

_PROTOCOL_RE = re.compile(r"[a-z][a-z0-9+.-]{0,31}")
_URI_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}:[\x21-\x7e]{1,2040}")
_ID_RE = re.compile(r"[\x21-\x7e]{1,512}")
_REGION_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_MEDIA_RE = re.compile(r"[\x21-\x7e]{1,128}")
_INTERACTION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def epoch(value: Any) -> float | None:
    """RFC 3339 timestamp -> epoch seconds (None when not one; naive = UTC)."""
    if not isinstance(value, str) or not 0 < len(value) <= 64:
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def _small_object(v: Any) -> bool:
    if not isinstance(v, dict):
        return False
    try:
        return len(canonicalize(v)) <= MAX_OBJECT_BYTES
    except (TypeError, ValueError):
        return False


def _binding_problem(b: Any) -> str | None:
    if not isinstance(b, dict):
        return "must be an object"
    proto = b.get("protocol")
    if not isinstance(proto, str) or _PROTOCOL_RE.fullmatch(proto) is None:
        return "protocol must be a lowercase protocol name such as 'https'"
    endpoint = b.get("endpoint")
    if not isinstance(endpoint, str) or _URI_RE.fullmatch(endpoint) is None:
        return "endpoint must be a URI (scheme:...) of at most 2048 printable characters"
    media = b.get("media_types")
    if media is not None and not (
        isinstance(media, list)
        and len(media) <= MAX_MEDIA_TYPES
        and all(isinstance(m, str) and _MEDIA_RE.fullmatch(m) for m in media)
    ):
        return f"media_types must be a list of at most {MAX_MEDIA_TYPES} media types"
    model = b.get("interaction_model")
    if model is not None and not (
        isinstance(model, str) and _INTERACTION_RE.fullmatch(model) is not None
    ):
        return "interaction_model must be a name such as 'request-response'"
    priority = b.get("priority")
    if priority is not None and not (_is_int(priority) and 0 <= priority <= 1_000_000):
        return "priority must be an integer from 0 to 1000000"
    if not _small_object(b):
        return f"must be at most {MAX_OBJECT_BYTES} bytes as JSON"
    return None


def _regions(constraints: Mapping[str, Any]) -> list[str] | None:
    """The regions a constraints object declares (None when malformed)."""
    out: list[str] = []
    for key in ("region", "regions"):
        v = constraints.get(key)
        if v is None:
            continue
        items = v if isinstance(v, list) else [v]
        if len(items) > MAX_REGIONS or not all(
            isinstance(r, str) and _REGION_RE.fullmatch(r.lower()) for r in items
        ):
            return None
        out.extend(r.lower() for r in items)
    return out


def validate_profile_fields(caps: Mapping[str, Any]) -> None:
    """Raise InvalidCapabilities (422) for a malformed profile field."""

    def bad(name: str, what: str) -> InvalidCapabilities:
        return InvalidCapabilities(f"capabilities.{name} {what}")

    if "id" in caps and not (isinstance(caps["id"], str) and _ID_RE.fullmatch(caps["id"])):
        raise bad("id", "must be 1-512 printable ASCII characters without spaces")
    if "name" in caps and not (isinstance(caps["name"], str) and 0 < len(caps["name"]) <= 256):
        raise bad("name", "must be a string of 1-256 characters")
    if "description" in caps and not (
        isinstance(caps["description"], str) and 0 < len(caps["description"]) <= 4000
    ):
        raise bad("description", "must be a string of 1-4000 characters")
    bindings = caps.get("bindings")
    if bindings is not None:
        if not isinstance(bindings, list) or not 0 < len(bindings) <= MAX_BINDINGS:
            raise bad("bindings", f"must be a list of 1-{MAX_BINDINGS} binding objects")
        for i, b in enumerate(bindings):
            problem = _binding_problem(b)
            if problem is not None:
                raise InvalidCapabilities(f"capabilities.bindings[{i}]: {problem}")
    for name in ("auth", "constraints"):
        if name in caps and not _small_object(caps[name]):
            raise bad(name, f"must be an object of at most {MAX_OBJECT_BYTES} bytes as JSON")
    if "constraints" in caps and _regions(caps["constraints"]) is None:
        raise bad("constraints", f"region(s) must be 1-{MAX_REGIONS} region names (a-z 0-9 . _ -)")
    if "status" in caps and caps["status"] not in STATUSES:
        raise bad("status", f"must be one of {', '.join(STATUSES)}")
    for name in ("expires_at", "updated_at"):
        if name in caps and epoch(caps[name]) is None:
            raise bad(name, "must be an RFC 3339 timestamp")
    if "signature" in caps and not isinstance(caps["signature"], dict):
        raise bad("signature", "must be an object")


@dataclass(frozen=True, slots=True)
class ProfileAttrs:
    """What the registry filters on, per agent."""

    # sorted, deduplicated, interned (tuples: a million agents hold these)
    tags: tuple[str, ...]
    protocols: tuple[str, ...]
    regions: tuple[str, ...]
    expires_at: float  # epoch seconds; +inf when the record does not expire
    updated_at: float  # epoch seconds of the metadata's last update


def bindings_of(manifest: Mapping[str, Any], caps: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The declared bindings by priority (stable), else the implicit AGTP one."""
    declared = caps.get("bindings")
    if isinstance(declared, list) and declared:
        ranked = sorted(
            enumerate(declared),
            key=lambda t: (
                (t[1].get("priority", 1_000_001), t[0]) if isinstance(t[1], dict) else (0, 0)
            ),
        )
        return [dict(b) for _, b in ranked if isinstance(b, dict)]
    uri = manifest.get("manifest_uri")
    return [{"protocol": "agtp", "endpoint": uri}] if isinstance(uri, str) and uri else []


def metadata_updated_at(manifest: Mapping[str, Any], caps: Mapping[str, Any], stored: str) -> str:
    """When the metadata was last updated: the capability document's
    ``updated_at``, else the manifest's ``last_updated``, else its
    ``activated_at``, else when ANS stored it."""
    for value in (
        caps.get("updated_at"),
        manifest.get("last_updated"),
        manifest.get("activated_at"),
    ):
        if epoch(value) is not None:
            return str(value)
    return stored


def _interned(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(sys.intern(v) for v in sorted(set(values)))


def attrs_of(manifest: Mapping[str, Any], caps: Mapping[str, Any], stored: str) -> ProfileAttrs:
    raw_tags = caps.get("tags")
    tags = _interned(
        t
        for t in (normalize_tag(str(x)) for x in (raw_tags if isinstance(raw_tags, list) else []))
        if t
    )
    protocols = _interned(
        str(b["protocol"]).lower() for b in bindings_of(manifest, caps) if "protocol" in b
    )
    constraints = caps.get("constraints")
    regions = _interned((_regions(constraints) or []) if isinstance(constraints, dict) else [])
    expires = epoch(caps.get("expires_at"))
    updated = epoch(metadata_updated_at(manifest, caps, stored))
    return ProfileAttrs(
        tags=tags,
        protocols=protocols,
        regions=regions,
        expires_at=math.inf if expires is None else expires,
        updated_at=updated if updated is not None else math.nan,
    )


def item_filter_failure(item: Mapping[str, Any], p: ProfileParams, now: float) -> str | None:
    """Why a result item (a federation peer's) fails this request's profile
    hard filters or has expired, or None. An item that does not carry what a
    filter needs (``tags``, ``bindings``, ``regions``, ``freshness``) fails
    it: a hard filter this ANS cannot check is not passed on."""
    fresh = item.get("freshness")
    fresh = fresh if isinstance(fresh, dict) else {}
    expires = epoch(fresh.get("expires_at"))
    if expires is not None and expires <= now:
        return "expired"
    if not p.filters:
        return None
    if p.required_tags or p.excluded_tags:
        raw = item.get("tags")
        if not isinstance(raw, list):
            return "carries no tags"
        tags = {normalize_tag(t) for t in raw if isinstance(t, str)}
        if not tags.issuperset(p.required_tags):
            return "lacks a required tag"
        if tags.intersection(p.excluded_tags):
            return "holds an excluded tag"
    if p.protocols:
        bindings = item.get("bindings")
        held = {
            str(b.get("protocol", "")).lower()
            for b in (bindings if isinstance(bindings, list) else [])
            if isinstance(b, dict)
        }
        if not held.intersection(p.protocols):
            return "no binding with a requested protocol"
    if p.regions:
        regions = item.get("regions")
        if not isinstance(regions, list) or not {str(r).lower() for r in regions}.intersection(
            p.regions
        ):
            return "declares none of the requested regions"
    if p.max_results_age_seconds is not None:
        updated = epoch(fresh.get("updated_at"))
        if updated is None or now - updated > p.max_results_age_seconds:
            return "metadata older than max_results_age_seconds"
    return None
