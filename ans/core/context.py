"""The parts every core collaborator is handed: nothing global.

:class:`CoreContext` carries what :class:`ans.service.AnsService` is built
with (config, store, matcher, signing key, trusted governance keys, audit log,
clock, id source, federator) plus the two policies derived from the config
(zones, relevance). It is one shared, mutable object so that replacing the
audit log or the signing key (a test reopening the log, a key rotation) is
seen by every collaborator at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from ans.federation.federator import Federator
from ans.governance.audit import AuditLog
from ans.governance.clock import Clock, utc_now
from ans.governance.keys import SigningKey
from ans.governance.policy import ZonePolicy
from ans.governance.signing import KeyLookup
from ans.protocol.messages import Limits

from ..config import Config
from ..matcher import CapabilityMatcher
from ..relevance import RelevanceGate
from ..store import RegistryStore

__all__ = ["Clock", "CoreContext", "new_query_id", "utc_now"]



def new_query_id() -> str:
    return uuid.uuid4().hex[:16]


@dataclass(eq=False)
class CoreContext:
    config: Config
    store: RegistryStore
    matcher: CapabilityMatcher
    key: SigningKey
    governance_keys: KeyLookup
    audit: AuditLog
    clock: Clock = utc_now
    new_id: Callable[[], str] = new_query_id
    federator: Federator | None = None
    zones: ZonePolicy = field(init=False)
    relevance: RelevanceGate = field(init=False)  # what counts as a match (ans.relevance)
    limits: Limits = field(init=False)

    def __post_init__(self) -> None:
        c = self.config
        self.zones = ZonePolicy.of(
            c.restricted_zones, c.public_zones, c.unlisted_zones == "restricted"
        )
        self.relevance = c.relevance
        self.limits = Limits(
            max_body_bytes=c.max_body_bytes,
            default_limit=c.default_limit,
            max_limit=c.max_limit,
        )
