"""Forwarding a DISCOVER to trusted peers and bringing back verified candidates.

:meth:`Federator.plan` decides whether and to whom to forward (fewer than
``limit`` local results, hop budget left, not already on the path, peer
tier and zones eligible, not being skipped). :meth:`Federator.start` asks
every peer of the plan concurrently and :meth:`Federator.collect` waits for
them -- per-peer timeout, one overall deadline -- returning the verified
candidates plus one warning per peer that failed, misbehaved or was skipped
(:mod:`.health`: a peer that keeps timing out or refusing connections is
left out for a while, then probed); :meth:`Federator.gather` is both in one.
Every forward and every drop is an audit record, and so is every peer being
skipped or restored. :func:`~.merge.merge` de-duplicates (local wins),
re-ranks with the caller's formula and cuts to ``limit``.

This module owns the deciding and the asking (and the audit of both); the
forward's data types are in ``plan.py``, the merge in ``merge.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson
import structlog
from ans.governance.audit import AuditLog
from ans.governance.clock import Clock
from ans.governance.policy import ZonePolicy, max_tier, requester_fields
from ans.protocol.messages import (
    AGTP_VERSION,
    CONTENT_TYPE,
    FEDERATION_BUDGET_HEADER,
    FEDERATION_PATH_HEADER,
    DiscoverRequest,
    query_digest,
)
from ans.protocol.profile_params import forwarded_parameters

from .health import DOWN_CODES, PeerHealth, Skip
from .peer_keys import PeerKeyCache, PeerKeyUnavailable
from .peers import FederationSettings, Peer
from .plan import Dispatched, Fanout, Gathered, Plan, SentOnce
from .transport import PeerError, PeerTransport
from .verify import (
    Expectation,
    PeerKeyMismatch,
    VerifiedAnswer,
    parse_reply,
    verify_result,
)

log = structlog.get_logger("ans.federation")
Monotonic = Callable[[], float]
# Drops that reflect our own policy, not peer misbehaviour: audited, never
# surfaced as warnings (a warning about a restricted agent would leak it).
SILENT_DROPS = frozenset({"restricted_zone", "below_capability_floor"})
# Below this much time there is no point forwarding.
MIN_BUDGET = 0.05

WARNING_CODES = frozenset(
    {
        "peer_timeout",
        "peer_unreachable",
        "peer_error",
        "peer_bad_response",
        "peer_key_unavailable",
        "peer_signature_invalid",
        "peer_digest_mismatch",
        "peer_result_stale",
        "peer_over_limit",
        "peer_entry_invalid",
        "peer_threshold_violation",
        "peer_zone_not_accepted",
        "peer_skipped",
    }
)
# Failures that say nothing about whether the peer is up.
NEUTRAL_CODES = frozenset({"peer_key_unavailable", "peer_on_path"})


class Federator:
    def __init__(
        self,
        self_id: str,
        peers: Iterable[Peer],
        settings: FederationSettings,
        transport: PeerTransport,
        audit: AuditLog,
        zones: ZonePolicy,
        min_capability_match: float,
        clock: Clock,
        monotonic: Monotonic = time.monotonic,
    ) -> None:
        self.self_id = self_id
        self.peers = tuple(peers)
        self.settings = settings
        self.transport = transport
        self.audit = audit
        self.zones = zones
        self.min_capability_match = min_capability_match
        self.clock = clock
        self.keys = PeerKeyCache(transport, settings, monotonic)
        self.health = PeerHealth(settings, monotonic)

    async def aclose(self) -> None:
        await self.transport.aclose()

    # -- when and where --------------------------------------------------------------
    def plan(self, req: DiscoverRequest, local_matches: int) -> Plan:
        s = self.settings
        incoming = req.federation_path
        stay = Plan((), 0.0, incoming)  # answer locally
        if not self.peers or local_matches >= req.params.limit:
            return stay
        if self.self_id in incoming:
            log.debug("federation loop: answering locally", path=list(incoming))
            return stay
        if len(incoming) + 1 > s.max_hops:
            return stay
        deadline = s.deadline
        if req.federation_budget_ms is not None:
            # Leave the forwarding ANS time to merge: answer in 80% of its budget.
            deadline = min(deadline, req.federation_budget_ms / 1000.0 * 0.8 - 0.02)
        if deadline < MIN_BUDGET:
            return stay
        on_path = set(incoming)
        tier_cap = max_tier(req.params)
        eligible = tuple(
            (i, p)
            for i, p in enumerate(self.peers)
            if p.tier <= tier_cap  # its results could never pass the caller's tier floor
            and p.accepts_zone(req.params.governance_zone)
            and not on_path.intersection(self.keys.cached_kids(p))
        )
        asked: list[tuple[int, Peer]] = []
        skipped: list[tuple[Peer, Skip]] = []
        probes: set[str] = set()
        for i, p in eligible:
            skip = self.health.check(p.url)
            if skip is not None:
                skipped.append((p, skip))
                continue
            asked.append((i, p))
            if self.health.probing(p.url):
                probes.add(p.url)
        if not asked and not skipped:
            return stay
        path = (*incoming, self.self_id)
        limited = deadline < s.deadline
        return Plan(tuple(asked), deadline, path, tuple(skipped), frozenset(probes), limited)

    # -- asking ------------------------------------------------------------------------
    async def gather(
        self, req: DiscoverRequest, plan: Plan, dispatched: Dispatched | None = None
    ) -> Gathered:
        """Ask the plan's peers and bring back what they answered."""
        return await self.collect(self.start(req, plan, dispatched))

    def start(
        self, req: DiscoverRequest, plan: Plan, dispatched: Dispatched | None = None
    ) -> Fanout:
        """Create one task per peer, now (they send at their first step, in the
        next event-loop iteration); ``dispatched``, when given, is set once every
        peer's request has been handed to the transport (or has failed before).
        Then :meth:`collect` -- or :meth:`cancel` if the caller gives up first."""
        out = Gathered()
        if dispatched is not None:
            dispatched.expect(len(plan.peers))
        for peer, skip in plan.skipped:
            self._skipped(out, req, peer, skip)
        loop = asyncio.get_running_loop()
        if not plan.peers:
            return Fanout(req, plan, out, {}, loop.time())
        # Without client_context, at summary detail for minimal (profile_params).
        params = forwarded_parameters(req.raw_parameters)
        same = len(params) == len(req.raw_parameters)
        body = orjson.dumps(
            {"method": "DISCOVER", "task_id": req.task_id, "parameters": params}
            if req.task_id is not None
            else {"method": "DISCOVER", "parameters": params}
        )
        expect = Expectation(
            params=req.params,
            identity=req.identity,
            digest=req.query_digest if same else query_digest(params),
            zones=self.zones,
            min_capability_match=self.min_capability_match,
            now=self.clock(),
            max_clock_skew=self.settings.max_clock_skew,
        )
        tasks = {
            asyncio.create_task(self._ask(i, peer, req, plan, body, expect, dispatched)): peer
            for i, peer in plan.peers
        }
        return Fanout(req, plan, out, tasks, loop.time())

    def cancel(self, fanout: Fanout) -> None:
        """Stop the fan-out's requests; a probe among them decides nothing."""
        for task in fanout.tasks:
            task.cancel()
        self._release_probes(fanout.plan)

    def _release_probes(self, plan: Plan) -> None:
        for url in plan.probes:
            if self.health.probing(url):
                self.health.release(url)

    async def collect(self, fanout: Fanout) -> Gathered:
        """Wait (up to the plan's deadline, counted from :meth:`start`) for the
        peers' answers; verified candidates and warnings, audited."""
        if not fanout.tasks:
            return fanout.out
        try:
            return await self._collect(fanout)
        finally:
            self._release_probes(fanout.plan)  # a probe cut short decides nothing

    async def _collect(self, fanout: Fanout) -> Gathered:
        req, plan, out, tasks = fanout.req, fanout.plan, fanout.out, fanout.tasks
        left = plan.deadline - (asyncio.get_running_loop().time() - fanout.started)
        try:
            done, pending = await asyncio.wait(tasks, timeout=max(left, 0.0))
        except BaseException:
            for task in tasks:  # the caller went away: so do its peer requests
                task.cancel()
            raise
        for task in pending:
            task.cancel()
        for task in pending:
            peer = tasks[task]
            self._fail(
                out,
                req,
                peer,
                PeerError(
                    f"no answer within the federation deadline of {plan.deadline:.3f}s",
                    "peer_timeout",
                ),
                plan,
            )
        for task in done:
            peer = tasks[task]
            exc = task.exception()
            if exc is not None:
                if isinstance(exc, PeerError):
                    self._fail(out, req, peer, exc, plan)
                else:  # a bug must not fail the caller's request
                    log.error("federation task failed", peer=peer.name, error=repr(exc))
                    self.health.release(peer.url)
                    self._fail(out, req, peer, PeerError("internal error", "peer_error"))
                continue
            answer, elapsed = task.result()
            self._answered(req, peer)
            self._accept(out, req, answer, elapsed)
        out.candidates.sort(key=lambda c: (c.peer_index, c.canonical_id))
        out.warnings.sort(key=lambda w: (w["peer"], w["code"]))
        return out

    async def _ask(
        self,
        index: int,
        peer: Peer,
        req: DiscoverRequest,
        plan: Plan,
        body: bytes,
        expect: Expectation,
        dispatched: Dispatched | None = None,
    ) -> tuple[VerifiedAnswer, float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        timeout = min(peer.timeout or self.settings.peer_timeout, plan.deadline)
        sent = SentOnce(dispatched)
        try:
            async with asyncio.timeout(timeout):  # no extra task, unlike wait_for
                answer = await self._ask_once(
                    index, peer, req, plan, body, expect, started + timeout, sent
                )
            return answer, (loop.time() - started) * 1000.0
        except TimeoutError:
            raise PeerError(f"no answer within {timeout:.3f}s", "peer_timeout") from None
        finally:
            sent()  # failed or timed out before sending: nothing to wait for

    async def _ask_once(
        self,
        index: int,
        peer: Peer,
        req: DiscoverRequest,
        plan: Plan,
        body: bytes,
        expect: Expectation,
        deadline: float,
        sent: Callable[[], None] = lambda: None,
    ) -> VerifiedAnswer:
        loop = asyncio.get_running_loop()
        keys = await self.keys.get(peer, max(deadline - loop.time(), 0.001))
        if plan.path and set(plan.path[:-1]).intersection(keys.kids()):
            raise PeerError("peer is already on the federation path", "peer_on_path")
        remaining = deadline - loop.time()
        headers = {
            "agtp-version": AGTP_VERSION,
            "content-type": CONTENT_TYPE,
            "agent-id": req.identity.agent_id,
            "principal-id": req.identity.principal_id,
            "authority-scope": req.identity.scope_header or str(req.identity.scope),
            FEDERATION_PATH_HEADER: ", ".join(plan.path),
            FEDERATION_BUDGET_HEADER: str(max(1, int(remaining * 1000))),
        }
        if req.task_id is not None:
            headers["task-id"] = req.task_id
        if req.identity.bearer_token is not None:
            # Token mode: the caller's governance token, unchanged; a peer in
            # token mode accepts it only if it is in the token's audience.
            headers["authorization"] = f"Bearer {req.identity.bearer_token}"
        # Signalled just before the call: the transport writes the request
        # before its first suspension, i.e. before the waiter can resume.
        sent()
        reply = await self.transport.send(
            peer, "DISCOVER", peer.url + "/", headers, body, remaining
        )
        result = parse_reply(reply, self.settings.max_response_bytes)
        try:
            return verify_result(peer, index, result, keys, expect)
        except PeerKeyMismatch:
            # The peer may have rotated its key: refetch once and verify again.
            fresh = await self.keys.get(peer, max(deadline - loop.time(), 0.001), refresh=True)
            return verify_result(peer, index, result, fresh, expect)

    # -- outcomes ------------------------------------------------------------------------
    def _fail(
        self,
        out: Gathered,
        req: DiscoverRequest,
        peer: Peer,
        exc: PeerError,
        plan: Plan | None = None,
    ) -> None:
        code = exc.code if exc.code in WARNING_CODES else "peer_error"
        if isinstance(exc, PeerKeyUnavailable):
            code = "peer_key_unavailable"
        if plan is not None:
            self._health(req, peer, exc.code, code, plan)
        if exc.code == "peer_on_path":  # a loop we avoided, not a failure
            log.info("federation: peer already on the path, not asked", peer=peer.name)
            return
        message = f"peer {peer.name}: {exc.message}"[:300]
        out.warnings.append({"code": code, "peer": peer.url, "message": message})
        log.warning("federation peer dropped", peer=peer.name, code=code, reason=exc.message)
        self._audit(req, "federation_forward", peer, outcome=code, received=0, accepted=0)
        self._audit(req, "federation_drop", peer, code=code, count=1, reason=exc.message[:300])

    def _health(self, req: DiscoverRequest, peer: Peer, raw: str, code: str, plan: Plan) -> None:
        """Tell :class:`PeerHealth` how a forward ended; audit a peer being
        skipped (or skipped longer after a failed probe)."""
        caller_cut = code == "peer_timeout" and plan.budget_limited
        if raw in NEUTRAL_CODES or code in NEUTRAL_CODES or caller_cut:
            self.health.release(peer.url)
        elif code in DOWN_CODES:
            probe = peer.url in plan.probes
            period = self.health.failed(peer.url, code, probe=probe)
            if period is not None:
                log.warning("federation peer skipped", peer=peer.name, seconds=period, last=code)
                self._audit(
                    req,
                    "federation_peer_skipped",
                    peer,
                    skip_seconds=period,
                    last_failure=code,
                    after_probe=probe,
                )
        else:  # it answered, if badly: it is up
            self._answered(req, peer)

    def _answered(self, req: DiscoverRequest, peer: Peer) -> None:
        if self.health.answered(peer.url):
            log.info("federation peer restored", peer=peer.name)
            self._audit(req, "federation_peer_restored", peer)

    def _skipped(self, out: Gathered, req: DiscoverRequest, peer: Peer, skip: Skip) -> None:
        message = skip.message(peer.name)[:300]
        out.warnings.append({"code": "peer_skipped", "peer": peer.url, "message": message})
        self._audit(req, "federation_drop", peer, code="peer_skipped", count=1, reason=message)

    def _accept(
        self, out: Gathered, req: DiscoverRequest, answer: VerifiedAnswer, elapsed: float
    ) -> None:
        peer = answer.peer
        out.candidates.extend(answer.candidates)
        self._audit(
            req,
            "federation_forward",
            peer,
            outcome="ok",
            peer_ans_id=answer.ans_id,
            peer_path=list(answer.path),
            received=answer.received,
            accepted=len(answer.candidates),
            elapsed_ms=round(elapsed, 3),
        )
        for code, count in sorted(answer.drops.items()):
            detail = answer.drop_examples.get(code, "")
            self._audit(req, "federation_drop", peer, code=code, count=count, reason=detail[:300])
            if code in SILENT_DROPS:
                continue
            message = f"peer {peer.name}: {count} result(s) dropped ({code}), e.g. {detail}"
            out.warnings.append({"code": code, "peer": peer.url, "message": message[:300]})
            log.warning("federation results dropped", peer=peer.name, code=code, count=count)

    def _audit(self, req: DiscoverRequest, event: str, peer: Peer, **fields: Any) -> None:
        self.audit.record(
            event,
            **requester_fields(req.identity, "DISCOVER", req.task_id),
            query_digest=req.query_digest,
            peer=peer.url,
            granted_trust_tier=peer.tier,
            **fields,
        )
