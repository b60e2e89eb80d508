"""The typed AGTP requests (DISCOVER, DESCRIBE, ACTIVATE, LIFECYCLE), the
requester :class:`Identity`, the parser's :class:`Limits`, and the protocol
constants and bounds their parsers check against.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .scope import AuthorityScope

AGTP_VERSION = "AGTP/1.0"
CONTENT_TYPE = "application/agtp+json"
ACCEPTED_CONTENT_TYPES = frozenset({CONTENT_TYPE, "application/json"})

# DESCRIBE capability domains of -02 6.5 plus the efficient-discovery profile's
# tags/examples; DISCOVER's capability_domains must name these.
CAPABILITY_DOMAINS = frozenset(
    {"methods", "modalities", "tools", "version", "budget", "zones", "tags", "examples"}
)

FEDERATION_PATH_HEADER = "agtp-federation-path"
FEDERATION_BUDGET_HEADER = "agtp-federation-budget-ms"
MAX_FEDERATION_PATH = 16
MAX_FEDERATION_BUDGET_MS = 600_000
# An ANS is named on a federation path by its signing key id (RFC 7638 thumbprint).
ANS_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")

MAX_ID_LEN = 512
MAX_TASK_ID_LEN = 256
MAX_INTENT_LEN = 2000
MAX_DOMAIN_NAMES = 16

_PRINTABLE_RE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?")
ZONE_RE = re.compile(r"zone:[a-z0-9][a-z0-9._-]{0,119}")
ORG_DOMAIN_RE = re.compile(
    r"(?=.{1,253}\Z)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
)
CANONICAL_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,256}")


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds the parser enforces; passed in from configuration."""

    max_body_bytes: int = 256 * 1024
    default_limit: int = 10
    max_limit: int = 100


@dataclass(frozen=True, slots=True)
class Identity:
    """The requester as asserted by the AGTP identity headers."""

    agent_id: str
    principal_id: str
    scope: AuthorityScope
    session_id: str | None = None
    # The Authority-Scope header exactly as received (federation forwards it unchanged).
    scope_header: str = field(default="", compare=False)
    # Set by requester authentication in token mode: the verified bearer token
    # (forwarded unchanged to federation peers) and its optional zone claim.
    bearer_token: str | None = field(default=None, compare=False, repr=False)
    token_zone: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class ProfileParams:
    """The profile fields of one DISCOVER, parsed (the core's view)."""

    intent: str | None = None  # from intent or its alias query
    required_tags: tuple[str, ...] = ()
    excluded_tags: tuple[str, ...] = ()
    preferred_tags: tuple[str, ...] = ()
    protocols: tuple[str, ...] = ()
    max_results_age_seconds: float | None = None
    regions: tuple[str, ...] = ()
    zone: str | None = None  # constraints.zone: the governance zone filter
    detail: str = "summary"
    client_context_digest: str | None = None
    unsupported_filters: tuple[str, ...] = ()
    # The request speaks the profile (any of its fields, or a name ANS does not
    # know): the answer has the profile's full item shape. A surface that
    # always wants it (the profile's JSON binding) sets it with
    # dataclasses.replace.
    used: bool = False

    @property
    def filters(self) -> bool:
        """Whether any of the profile's hard filters is given (tags, protocols,
        age, region): the registry then applies its profile columns."""
        return bool(
            self.required_tags
            or self.excluded_tags
            or self.protocols
            or self.regions
            or self.max_results_age_seconds is not None
        )


NO_PROFILE = ProfileParams()


@dataclass(frozen=True, slots=True)
class DiscoverParams:
    intent: str | None
    capability_domains: tuple[str, ...] | None
    trust_tier_min: int | None
    behavioral_trust_min: float | None
    governance_zone: str | None
    org_domain: str | None
    limit: int
    scope_negotiate: bool
    include_evidence: bool = False
    # Routing (discovery draft 6.1): the agent the caller would like as results[0].
    preferred_agent: str | None = None
    # The efficient-discovery profile's fields (protocol/profile_params.py).
    profile: ProfileParams = NO_PROFILE


@dataclass(frozen=True, slots=True)
class DiscoverRequest:
    identity: Identity
    task_id: str | None
    params: DiscoverParams
    query_digest: str
    raw_parameters: Mapping[str, Any] = field(compare=False, repr=False)
    # Federation (discovery draft 5): the ANS servers already on the path, in
    # order, and the time the forwarding ANS gives us to answer.
    federation_path: tuple[str, ...] = ()
    federation_budget_ms: int | None = None


@dataclass(frozen=True, slots=True)
class DescribeRequest:
    identity: Identity | None
    task_id: str | None
    canonical_id: str | None


@dataclass(frozen=True, slots=True)
class ActivateRequest:
    identity: Identity
    task_id: str | None
    manifest: dict[str, Any]
    capabilities: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LifecycleRequest:
    """A governance lifecycle event (SUSPEND/REVOKE/DEPRECATE/REINSTATE) for one agent."""

    identity: Identity
    task_id: str | None
    event: dict[str, Any]


AgtpRequest = DiscoverRequest | DescribeRequest | ActivateRequest | LifecycleRequest
SUPPORTED_METHODS = ("DISCOVER", "DESCRIBE", "ACTIVATE", "LIFECYCLE")
