"""The ANS core behind one object, for the callers that hold one.

:class:`AnsService` is a thin facade: it builds the core collaborators of
:mod:`ans.core` around one :class:`~ans.core.context.CoreContext` and one
:class:`~ans.core.live_index.LiveIndex`, and forwards to them. New surfaces
call the collaborators directly (``service.discovery``, ``service.registrar``,
``service.lifecycle_events``); the ASGI app, the native listener, the CLI,
the refresher, federation tests and benchmarks keep calling the methods here.
It does no network I/O.

The collaborators, one job each: :class:`~ans.core.loader.IndexLoader`
(start-up, snapshots), :class:`~ans.core.discovery.Discovery` (DISCOVER),
:class:`~ans.core.registrar.Registrar` (ACTIVATE, bulk import),
:class:`~ans.core.lifecycle.LifecycleEvents` (SUSPEND / REINSTATE / REVOKE /
DEPRECATE), :class:`~ans.core.freshness_writes.FreshnessWrites` (index freshness),
:class:`~ans.core.describe.Describer` (DESCRIBE, own manifest, JWKS).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar, cast, overload

from ans.federation.federator import Federator
from ans.governance.audit import AuditLog
from ans.governance.keys import SigningKey
from ans.governance.policy import DISCOVERY_QUERY, ZonePolicy
from ans.governance.signing import KeyLookup
from ans.protocol.errors import AgtpError
from ans.protocol.messages import (
    ActivateRequest,
    DescribeRequest,
    DiscoverRequest,
    Identity,
    LifecycleRequest,
    Limits,
)
from ans.protocol.newer import AgentRef
from ans.protocol.scope import ScopeToken

from .config import Config
from .core.context import Clock, CoreContext, new_query_id, utc_now
from .core.describe import Describer
from .core.discovery import Discovery
from .core.freshness_writes import FreshnessWrites
from .core.lifecycle import LifecycleEvents
from .core.live_index import LiveIndex
from .core.loader import IndexLoader
from .core.names import NameResolver
from .core.registrar import Registrar
from .matcher import CapabilityMatcher, ProfileVectors
from .relevance import RelevanceGate
from .store import RegistryStore, StoredAgent

__all__ = ["AnsService", "Clock", "utc_now"]

T = TypeVar("T")


class _Shared(Generic[T]):
    """An attribute of the service that is the shared context's, so that
    replacing it (the audit log reopened, the signing key rotated) reaches
    every collaborator."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _Shared[T]: ...
    @overload
    def __get__(self, obj: AnsService, owner: type) -> T: ...
    def __get__(self, obj: AnsService | None, owner: type) -> _Shared[T] | T:
        if obj is None:
            return self
        return cast(T, getattr(obj.ctx, self.name))

    def __set__(self, obj: AnsService, value: T) -> None:
        setattr(obj.ctx, self.name, value)


class AnsService:
    config = _Shared[Config]()
    store = _Shared[RegistryStore]()
    matcher = _Shared[CapabilityMatcher]()
    key = _Shared[SigningKey]()
    governance_keys = _Shared[KeyLookup]()
    audit = _Shared[AuditLog]()
    clock = _Shared[Clock]()
    new_id = _Shared[Callable[[], str]]()
    federator = _Shared["Federator | None"]()
    zones = _Shared[ZonePolicy]()
    relevance = _Shared[RelevanceGate]()
    limits = _Shared[Limits]()

    def __init__(
        self,
        config: Config,
        store: RegistryStore,
        matcher: CapabilityMatcher,
        signing_key: SigningKey,
        governance_keys: KeyLookup,
        audit: AuditLog,
        clock: Clock = utc_now,
        new_id: Callable[[], str] = new_query_id,
        federator: Federator | None = None,
    ) -> None:
        self.ctx = ctx = CoreContext(
            config, store, matcher, signing_key, governance_keys, audit, clock, new_id, federator
        )
        self.index = index = LiveIndex(store, matcher, config.ranking)
        self.loader = IndexLoader(ctx, index)
        self.discovery = Discovery(ctx, index)
        self.registrar = Registrar(ctx, index)
        self.lifecycle_events = LifecycleEvents(ctx, index)
        self.freshness = FreshnessWrites(ctx, index)
        self.describer = Describer(ctx, index)
        self.names = NameResolver(ctx, index)

    # -- start-up and health -----------------------------------------------------------
    def load(self, snapshot: Mapping[str, Any] | None = None, *, hold_fields: bool = True) -> int:
        """Fill the index from the store (and ``snapshot``): :meth:`IndexLoader.load`."""
        return self.loader.load(snapshot, hold_fields=hold_fields)

    def save_snapshot(self, directory: Path, *, force: bool = False) -> bool:
        return self.loader.save_snapshot(directory, force=force)

    @property
    def index_loaded_from(self) -> str:
        return self.loader.loaded_from

    @property
    def load_stats(self) -> dict[str, Any]:
        return self.loader.stats

    def health(self) -> dict[str, Any]:
        """The /healthz body: agent count, where the index came from and, with
        peers, how many are being skipped (counts only: peer URLs stay private)."""
        body: dict[str, Any] = {
            "status": "ok",
            "agents": len(self.index),
            "index_loaded_from": self.loader.loaded_from,
            "indexed": len(self.matcher),
            "embedding_dims": self.matcher.dim,
        }
        follower = self.index.follower
        if follower is not None:  # one worker of ``ans serve --workers N``
            body["worker"] = follower.worker
        if self.federator is not None:
            states = self.federator.health.snapshot().values()
            body["federation"] = {
                "peers": len(self.federator.peers),
                "skipped": sum(1 for st in states if st["state"] == "skipped"),
            }
        return body

    def readiness(self) -> dict[str, Any]:
        """The /readyz body: ready only when the index is loaded, the store
        answers and the audit log can be written; else the failing checks."""
        checks: dict[str, str] = {}
        checks["index"] = "ok" if self.loader.loaded_from != "empty" else "not loaded"
        try:
            self.store.max_seq()
            checks["store"] = "ok"
        except Exception as exc:
            checks["store"] = f"unreachable: {type(exc).__name__}"
        checks["audit"] = "ok" if self.audit.writable() else "not writable"
        failing = sorted(k for k, v in checks.items() if v != "ok")
        return {"status": "not ready" if failing else "ready", "checks": checks, "failing": failing}

    def __len__(self) -> int:
        return len(self.index)

    # -- the methods -------------------------------------------------------------------
    # DISCOVER and DESCRIBE first apply what other workers committed
    # (``ans serve --workers N``; a no-op in one process): see ans.follower.
    def discover(self, req: DiscoverRequest) -> dict[str, Any]:
        self.index.catch_up()
        return self.discovery.discover(req)

    async def discover_async(self, req: DiscoverRequest) -> dict[str, Any]:
        self.index.catch_up()
        return await self.discovery.discover_async(req)

    def resolve_name(self, req: DiscoverRequest, ref: AgentRef) -> dict[str, Any]:
        """A DISCOVER with a ``name`` (:mod:`ans.core.names`): same scope and
        zone checks as any DISCOVER, then the signed resolution."""
        self.discovery.check_scope_and_zone(req)
        return self.names.resolve(req, ref)

    def activate(self, req: ActivateRequest) -> dict[str, Any]:
        return self.registrar.activate(req)

    def activate_many(
        self,
        verified: Sequence[tuple[dict[str, Any], dict[str, Any], str]],
        requester: Mapping[str, Any] | None = None,
        vectors: Sequence[ProfileVectors | None] | None = None,
    ) -> tuple[list[str], int, list[tuple[int, AgtpError]]]:
        return self.registrar.activate_many(verified, requester, vectors)

    def admit_self_asserted(
        self,
        metadata: Any,
        *,
        source: str,
        identity: Identity,
        task_id: str | None = None,
        zone: str | None = None,
        owner: str | None = None,
    ) -> dict[str, Any]:
        """A self-asserted tier-3 record (:meth:`Registrar.admit_self_asserted`)."""
        return self.registrar.admit_self_asserted(
            metadata, source=source, identity=identity, task_id=task_id, zone=zone, owner=owner
        )

    def lifecycle(self, req: LifecycleRequest) -> dict[str, Any]:
        return self.lifecycle_events.apply(req)

    def describe(
        self,
        req: DescribeRequest,
        *,
        required: ScopeToken = DISCOVERY_QUERY,
        method: str = "DESCRIBE",
        signed: bool = True,
    ) -> dict[str, Any]:
        self.index.catch_up()
        return self.describer.describe(req, required=required, method=method, signed=signed)

    @property
    def manifest(self) -> dict[str, Any]:
        """This ANS's own signed Agent Manifest Document."""
        return self.describer.manifest

    def jwks(self) -> dict[str, Any]:
        return self.describer.jwks()

    # -- availability and freshness (driven by ans.freshness_runner) ---------------------------
    def mark_availability(self, canonical_id: str, reason: str | None) -> None:
        self.index.mark_availability(canonical_id, reason)

    def unavailable_reason(self, canonical_id: str) -> str | None:
        return self.index.unavailable_reason(canonical_id)

    def indexed_ids(self) -> list[str]:
        return self.index.ids()

    def refresh_capabilities(self, canonical_id: str, described: dict[str, Any]) -> bool:
        return self.freshness.refresh_capabilities(canonical_id, described)

    def remove_for_freshness(
        self,
        canonical_id: str,
        reason: str,
        failures: int,
        last_error: str,
        before_removal: Callable[[StoredAgent], str] | None = None,
    ) -> bool:
        return self.freshness.remove(canonical_id, reason, failures, last_error, before_removal)
