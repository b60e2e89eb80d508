"""Scope enforcement and trust gates.

* :func:`require_scope` — the SEP check (451 + one audit record).
* :class:`ZonePolicy` — restricted zones are scope tokens; asking for one
  without the grant is 453, and their agents are invisible to callers
  without it.
* :func:`first_failed_gate` — the hard filters of DISCOVER (lifecycle Active,
  trust tier, behavioral score floor, zone, org domain, restricted zone):
  the one scalar statement of them, naming the first that fails. The
  registry's vectorized mask (``ans.registry.Registry.gate_mask``) states
  the same rules over columns; a test holds the two in agreement.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from ans.protocol.errors import ScopeViolation, ZoneViolation
from ans.protocol.messages import DiscoverParams, Identity
from ans.protocol.scope import AuthorityScope, ScopeToken, parse_token

from .audit import AuditLog

DISCOVERY_QUERY = parse_token("discovery:query")
DISCOVERY_REGISTER = parse_token("discovery:register")
AGENTS_INVOKE = parse_token("agents:invoke")  # the HAIDIP invocation gateway
# DESIGN.md: absent trust_tier_min admits tiers 1-2; tier 3 only when asked for.
DEFAULT_MAX_TIER = 2


def requester_fields(identity: Identity, method: str, task_id: str | None) -> dict[str, Any]:
    """Who asked, for an audit record: the fields every request-bound record carries."""
    return {
        "method": method,
        "agent_id": identity.agent_id,
        "principal_id": identity.principal_id,
        "task_id": task_id,
    }


def audit_refusal(
    audit: AuditLog,
    event: str,
    status: int,
    identity: Identity,
    required: str,
    method: str,
    task_id: str | None,
) -> None:
    """One audit record for a refused request: who, what they held, what was needed."""
    audit.record(
        event,
        status=status,
        **requester_fields(identity, method, task_id),
        scope_presented=str(identity.scope),
        scope_required=required,
    )


def require_scope(
    identity: Identity, required: ScopeToken, *, method: str, task_id: str | None, audit: AuditLog
) -> None:
    if identity.scope.covers(required):
        return
    audit_refusal(audit, "scope_violation", 451, identity, str(required), method, task_id)
    raise ScopeViolation(f"{method} requires {required} in Authority-Scope")


@dataclass(frozen=True, slots=True)
class ZonePolicy:
    """Which zones are restricted. A zone listed as restricted is; a zone
    listed as public is not; any other zone follows ``unlisted_restricted``
    (False by default: unlisted zones are public)."""

    restricted: frozenset[str] = frozenset()
    public: frozenset[str] = frozenset()
    unlisted_restricted: bool = False

    @classmethod
    def of(
        cls,
        restricted: Iterable[str],
        public: Iterable[str] = (),
        unlisted_restricted: bool = False,
    ) -> ZonePolicy:
        return cls(frozenset(restricted), frozenset(public), unlisted_restricted)

    def is_restricted(self, zone: str) -> bool:
        if zone in self.restricted:
            return True
        return self.unlisted_restricted and zone not in self.public

    def granted(self, zone: str, scope: AuthorityScope) -> bool:
        if not self.is_restricted(zone):
            return True
        try:
            token = parse_token(zone)
        except Exception:  # a zone id that is no scope token can never be granted
            return False
        return bool(scope.covers(token))

    def check_requested(
        self,
        identity: Identity,
        zone: str | None,
        *,
        method: str,
        task_id: str | None,
        audit: AuditLog,
    ) -> None:
        if zone is None or self.granted(zone, identity.scope):
            return
        audit_refusal(audit, "zone_violation", 453, identity, zone, method, task_id)
        raise ZoneViolation(
            f"governance_zone {zone} is restricted; Authority-Scope must carry {zone}"
        )


class GatedAgent(Protocol):
    @property
    def lifecycle_state(self) -> str: ...
    @property
    def trust_tier(self) -> int: ...
    @property
    def behavioral_trust_score(self) -> float: ...
    @property
    def governance_zone(self) -> str: ...
    @property
    def org_domain(self) -> str: ...


def max_tier(params: DiscoverParams) -> int:
    return params.trust_tier_min if params.trust_tier_min is not None else DEFAULT_MAX_TIER


# The hard gates of DISCOVER, in the order they are checked: the reason
# first_failed_gate() returns.
GATE_LIFECYCLE = "lifecycle_state"
GATE_TRUST_TIER = "trust_tier"
GATE_BEHAVIORAL = "behavioral_trust_score"
GATE_ZONE = "governance_zone"
GATE_ORG = "org_domain"
GATE_RESTRICTED = "restricted_zone"
# The gates a caller sets in its DISCOVER parameters (the thresholds a peer
# answering our query must also respect), as opposed to lifecycle and zone grants.
THRESHOLD_GATES = frozenset({GATE_TRUST_TIER, GATE_BEHAVIORAL, GATE_ZONE, GATE_ORG})


def first_failed_gate(
    agent: GatedAgent, params: DiscoverParams, scope: AuthorityScope, zones: ZonePolicy
) -> str | None:
    """The first hard gate ``agent`` fails (one of the ``GATE_*`` names), or
    None when it passes them all. An agent failing any one is never returned
    or counted. ``agent.org_domain`` and ``params.org_domain`` are lowercase."""
    if agent.lifecycle_state != "Active":
        return GATE_LIFECYCLE
    if agent.trust_tier > max_tier(params):
        return GATE_TRUST_TIER
    if (
        params.behavioral_trust_min is not None
        and agent.behavioral_trust_score < params.behavioral_trust_min
    ):
        return GATE_BEHAVIORAL
    if params.governance_zone is not None and agent.governance_zone != params.governance_zone:
        return GATE_ZONE
    if params.org_domain is not None and agent.org_domain != params.org_domain:
        return GATE_ORG
    if not zones.granted(agent.governance_zone, scope):
        return GATE_RESTRICTED
    return None


def passes_gates(
    agent: GatedAgent, params: DiscoverParams, scope: AuthorityScope, zones: ZonePolicy
) -> bool:
    """All hard filters pass (:func:`first_failed_gate` is None)."""
    return first_failed_gate(agent, params, scope, zones) is None
