"""Which AGTP revision a request speaks, and what that changes on the wire.

ANS was built from AGTP -02 and discovery-00. The newer drafts (base -07 to
-09, discovery-01, bindings-00) keep the start line ``AGTP/1.0`` but change
the wire around it; nothing names the revision, so a request is recognised by
what it carries (:func:`recognise`) and answered in the same dialect:

=============================  ==========================================
a request carrying             means
=============================  ==========================================
``AGTP-Version`` header        -02 (the newer drafts retired it)
``Principal-ID`` header        -02 (renamed ``Owner-ID``)
``application/agtp+json``      -02 (the newer media type is ``vnd.``)
``application/vnd.agtp+json``  newer
``Owner-ID`` header            newer
``Target-Agent`` header        newer (the authors' reference client)
a path on the request line     newer (native framing only)
a comma in ``Authority-Scope``  newer (-09 Appendix: comma-separated list)
nothing of the above           -02 (today's behaviour)
=============================  ==========================================

A -02 marker wins over a newer one: a request that carries both is
ambiguous, and ambiguous requests get -02, so a -02 client sees no change.

This module also holds what differs per dialect in the answer: the status
codes (-09 renumbered 451/452/453 to 455/456/457 and added 262 Authorization
Required), the error code spelling (-09 and the reference server use
``kebab-case``) and the media types. Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from .request_types import CONTENT_TYPE


class Dialect(StrEnum):
    """The two wire dialects ANS speaks (the value is what logs and docs show)."""

    AGTP_02 = "agtp-02"
    NEWER = "agtp-09"


# Media types of the newer drafts (-09 "Wire Format and Content-Type").
NEWER_CONTENT_TYPE = "application/vnd.agtp+json"
IDENTITY_CONTENT_TYPE = "application/vnd.agtp.identity+json"
NEWER_ACCEPTED_CONTENT_TYPES = frozenset({NEWER_CONTENT_TYPE, "application/json"})

# Headers only the newer dialect sends / only -02 sends.
NEWER_MARKER_HEADERS = ("owner-id", "target-agent")
OLD_MARKER_HEADERS = ("agtp-version", "principal-id")

# -09 "Status Codes": AGTP-specific codes moved out of HTTP-assigned space.
AUTHORIZATION_REQUIRED = 262
NEWER_STATUS: Mapping[int, int] = {451: 455, 452: 456, 453: 457}


def media_type(headers: Mapping[str, str]) -> str:
    """The base of ``Content-Type`` (lowercase, without parameters), or ""."""
    value = headers.get("content-type")
    return value.split(";", 1)[0].strip().lower() if value else ""


def recognise(headers: Mapping[str, str], path: str | None = None) -> Dialect:
    """The dialect of one request from its (lowercase-named) headers and, on
    the native framing, the request-line path (None when the line had none)."""
    ctype = media_type(headers)
    if ctype == CONTENT_TYPE or any(h in headers for h in OLD_MARKER_HEADERS):
        return Dialect.AGTP_02
    if (
        path is not None
        or ctype.startswith("application/vnd.agtp")
        or any(h in headers for h in NEWER_MARKER_HEADERS)
        or "," in headers.get("authority-scope", "")
    ):
        return Dialect.NEWER
    return Dialect.AGTP_02


def status_for(dialect: Dialect, status: int) -> int:
    """The status code ``dialect`` uses for what -02 answers with ``status``."""
    if dialect is Dialect.NEWER:
        return NEWER_STATUS.get(status, status)
    return status


def code_for(dialect: Dialect, code: str) -> str:
    """-02 codes are ``snake_case``; the newer dialect spells them ``kebab-case``
    (``scope_violation`` -> ``scope-violation``), as -09 and the reference do."""
    return code.replace("_", "-") if dialect is Dialect.NEWER else code
