"""``ans peers check``: ask each configured peer once, exactly as a federated
DISCOVER would, and say what happened.

Each peer gets one probe through the same :class:`Federator` code a server
runs: the key fetch (``jwks_url``, ``jwks_file`` or DESCRIBE), the forwarded
DISCOVER with the identity headers and ``AGTP-Federation-Path``, then the
checks on the answer (signature, ``query_digest``, clock, every entry). So a
peer that passes here is one a server with the same configuration can use,
and a peer that fails names the warning code a caller of that server would
see. Peers are probed concurrently, each within the configured
``peer_timeout`` / ``deadline``, whatever their skip state.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import orjson
from ans.governance.audit import AuditLog
from ans.governance.policy import ZonePolicy
from ans.protocol.messages import AGTP_VERSION, CONTENT_TYPE, Limits, parse_discover

from .federator import Federator
from .peers import FederationSettings, Peer
from .plan import Plan
from .transport import PeerTransport

# The id this checker puts on the federation path: not a key id, so no peer
# mistakes it for itself or for one of its own peers.
CHECKER_ID = "ans-peers-check"
DEFAULT_INTENT = "federation health check"


@dataclass(frozen=True, slots=True)
class PeerCheck:
    peer: Peer
    ok: bool
    kids: tuple[str, ...]  # the peer's key ids we obtained (empty: none)
    ms: float  # key fetch (if not cached) + DISCOVER + verification
    results: int  # verified entries in its answer
    code: str | None = None  # the first warning, as a server's caller would see it
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Asker:
    """Who the probes claim to come from (the peer sees these headers)."""

    agent_id: str
    principal_id: str
    scope: str = "discovery:query"


async def check_peers(
    peers: Sequence[Peer],
    settings: FederationSettings,
    transport: PeerTransport,
    asker: Asker,
    *,
    intent: str = DEFAULT_INTENT,
    zones: ZonePolicy | None = None,
    min_capability_match: float = 0.0,
    clock: Callable[[], datetime],
) -> list[PeerCheck]:
    """One :class:`PeerCheck` per peer, in the order given."""
    with tempfile.TemporaryDirectory(prefix="ans-peers-check-") as tmp:
        audit = AuditLog(Path(tmp) / "audit.jsonl", clock)  # the probes' own, discarded
        fed = Federator(
            self_id=CHECKER_ID,
            peers=peers,
            settings=settings,
            transport=transport,
            audit=audit,
            zones=zones or ZonePolicy.of(()),
            min_capability_match=min_capability_match,
            clock=clock,
        )
        try:
            return list(
                await asyncio.gather(
                    *(_probe(fed, i, p, asker, intent) for i, p in enumerate(peers))
                )
            )
        finally:
            await fed.aclose()
            audit.close()


async def _probe(fed: Federator, index: int, peer: Peer, asker: Asker, intent: str) -> PeerCheck:
    params: dict[str, object] = {"intent": intent, "limit": 1}
    if peer.zones:  # ask it about a zone we accept from it, or every entry is dropped
        params["governance_zone"] = peer.zones[0]
    headers = {
        "agtp-version": AGTP_VERSION,
        "content-type": CONTENT_TYPE,
        "agent-id": asker.agent_id,
        "principal-id": asker.principal_id,
        "authority-scope": asker.scope,
    }
    body = orjson.dumps(
        {"method": "DISCOVER", "task_id": f"peers-check-{index}", "parameters": params}
    )
    req = parse_discover(headers, body, Limits())
    plan = Plan(((index, peer),), fed.settings.deadline, (CHECKER_ID,))
    started = time.perf_counter()
    gathered = await fed.gather(req, plan)
    ms = (time.perf_counter() - started) * 1000.0
    kids = tuple(sorted(fed.keys.cached_kids(peer)))
    if gathered.warnings:
        first = gathered.warnings[0]
        return PeerCheck(
            peer, False, kids, ms, len(gathered.candidates), first["code"], first["message"]
        )
    return PeerCheck(peer, True, kids, ms, len(gathered.candidates))
