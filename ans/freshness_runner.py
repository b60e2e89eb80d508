"""The index-freshness scheduler: the asyncio side of :mod:`ans.freshness_policy`.

:class:`FreshnessRunner` DESCRIBEs every indexed agent once per interval
(spread over it), polls each agent's ``/status`` sub-resource, updates
capabilities, marks availability, removes an agent after
``failures_before_removal`` consecutive failed DESCRIBEs (or at once on 410
Gone) and hands the governance notice to the persisted outbox, which a
second task delivers to the webhook. :meth:`FreshnessRunner.run_once` does
one round at an explicit ``now`` (tests drive it with a fake transport);
:meth:`start`/:meth:`stop` run it in the ASGI lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import structlog

from ans.federation.transport import PeerError, RequestTransport
from ans.governance.audit import rfc3339
from ans.governance.signing import sign_document
from ans.protocol.messages import AGTP_VERSION, CONTENT_TYPE

from .freshness_policy import (
    DESCRIBE_FAILED,
    DESCRIBE_GONE,
    NOT_RESPONDING,
    DocumentError,
    EndpointError,
    FreshnessSchedule,
    FreshnessSettings,
    Outcome,
    agent_endpoint,
    availability_from_status,
    capabilities_from_describe,
    origin_of,
    short_error,
    status_url,
)
from .outbox import Outbox, WebhookDelivery
from .profile_metadata import is_self_asserted
from .service import AnsService
from .store import StoredAgent

log = structlog.get_logger("ans.freshness_policy")
REFRESH_SCOPE = "discovery:refresh"
AGENT_REMOVED = "agent_removed"
MAX_SLEEP = 1.0  # newly indexed agents are noticed at least this often
WEBHOOK_IDLE = 5.0


@dataclass(slots=True)
class RoundReport:
    """What one :meth:`FreshnessRunner.run_once` did (for tests and logs)."""

    described: list[str] = field(default_factory=list)
    refreshed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    polled: dict[str, str | None] = field(default_factory=dict)


class FreshnessRunner:
    def __init__(
        self,
        service: AnsService,
        settings: FreshnessSettings,
        transport: RequestTransport,
        outbox: Outbox,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        new_event_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        self.service = service
        self.settings = settings
        self.transport = transport
        self.outbox = outbox
        self.monotonic = monotonic
        self.new_event_id = new_event_id
        self.schedule = FreshnessSchedule(settings)
        self.delivery = WebhookDelivery(
            outbox, settings, transport, service.audit, self._wall_clock
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._wake: asyncio.Event | None = None

    def _wall_clock(self) -> float:
        return float(self.service.clock().timestamp())

    # -- one round -----------------------------------------------------------------------
    async def run_once(self, now: float | None = None) -> RoundReport:
        """DESCRIBE the agents that are due, poll the due ``/status`` resources,
        with at most ``concurrency`` requests in flight."""
        now = self.monotonic() if now is None else now
        report = RoundReport()
        self.schedule.sync(self.service.indexed_ids(), now)
        sem = asyncio.Semaphore(self.settings.concurrency)

        # Each job's coroutine is made once it has a slot: one made before and
        # cancelled while waiting (the server stopping) was never awaited.
        async def bounded(
            job: Callable[[str, float, RoundReport], Awaitable[None]], cid: str
        ) -> None:
            async with sem:
                await job(cid, now, report)

        due = self.schedule
        jobs = [bounded(self._describe, cid) for cid in due.due_describe(now)]
        jobs += [bounded(self._status, cid) for cid in due.due_status(now)]
        await asyncio.gather(*jobs)
        return report

    def _headers(self, task_id: str) -> dict[str, str]:
        c = self.service.config
        return {
            "agtp-version": AGTP_VERSION,
            "agent-id": c.agent_id,
            "principal-id": c.principal_org,
            "authority-scope": REFRESH_SCOPE,
            "task-id": task_id,
            "content-type": CONTENT_TYPE,
        }

    async def _describe(self, cid: str, now: float, report: RoundReport) -> None:
        stored = self.service.store.get(cid)
        if stored is None or stored.lifecycle_state != "Active":
            return
        if is_self_asserted(stored.signer_kid):
            # Never probed: its endpoints are a publisher's claim (no requests
            # from this ANS to them); expires_at and re-announcing keep it fresh.
            return
        report.described.append(cid)
        try:
            endpoint = agent_endpoint(
                stored.manifest["manifest_uri"], stored.capabilities, self.settings.scheme
            )
        except EndpointError as exc:
            await self._failed(stored, now, f"no endpoint: {exc}", report)
            return
        task_id = f"refresh-{uuid.uuid4().hex[:16]}"
        body = orjson.dumps({"method": "DESCRIBE", "task_id": task_id, "parameters": {}})
        try:
            reply = await self.transport.request(
                origin_of(endpoint),
                "DESCRIBE",
                endpoint,
                self._headers(task_id),
                body,
                self.settings.timeout,
            )
        except PeerError as exc:
            await self._failed(stored, now, f"{exc.code}: {exc.message}", report)
            return
        if reply.status == 410:
            # -02 5.5: the agent is Revoked or Deprecated and MUST NOT be retried.
            await self._failed(stored, now, "DESCRIBE answered 410 Gone", report, gone=True)
            return
        if reply.status != 200:
            await self._failed(stored, now, f"DESCRIBE answered {reply.status}", report)
            return
        try:
            caps = capabilities_from_describe(reply.body)
        except DocumentError as exc:
            await self._failed(stored, now, f"invalid capability document: {exc}", report)
            return
        self.schedule.describe_ok(cid, now)
        try:
            changed = await asyncio.to_thread(self.service.refresh_capabilities, cid, caps)
        except Exception:  # our side failed, not the agent: no strike
            log.exception("capability refresh failed", canonical_id=cid)
            return
        if changed:
            report.refreshed.append(cid)

    async def _failed(
        self, stored: StoredAgent, now: float, error: str, report: RoundReport, gone: bool = False
    ) -> None:
        cid = stored.canonical_id
        error = short_error(error)
        report.failed[cid] = error
        outcome = self.schedule.describe_failed(cid, now, error, gone=gone)
        failures = self.schedule.failures(cid)
        log.info("DESCRIBE failed", canonical_id=cid, failures=failures, error=error)
        if outcome is not Outcome.REMOVE:
            return
        reason = DESCRIBE_GONE if gone else DESCRIBE_FAILED

        def write_notice(agent: StoredAgent) -> str:
            return self._enqueue_removal(agent, reason, failures, error)

        removed = await asyncio.to_thread(
            self.service.remove_for_freshness, cid, reason, failures, error, write_notice
        )
        if removed:
            report.removed.append(cid)
            if self._wake is not None:
                self._wake.set()

    def _enqueue_removal(self, agent: StoredAgent, reason: str, failures: int, error: str) -> str:
        """Sign the ``agent_removed`` notice and put it in the outbox (durably)."""
        svc = self.service
        m = agent.manifest
        event: dict[str, Any] = {
            "event": AGENT_REMOVED,
            "event_id": self.new_event_id(),
            "canonical_id": agent.canonical_id,
            "agent_label": m.get("agent_label"),
            "org_domain": m.get("org_domain"),
            "manifest_uri": m.get("manifest_uri"),
            "reason": reason,
            "failures": failures,
            "last_error": error,
            "removed_at": rfc3339(svc.clock()),
            "ans_id": svc.key.kid,
            "ans_agent_id": svc.config.agent_id,
        }
        signed = sign_document(event, svc.key, "signature")
        self.outbox.add(event["event_id"], AGENT_REMOVED, orjson.dumps(signed), self._wall_clock())
        return str(event["event_id"])

    async def _status(self, cid: str, now: float, report: RoundReport) -> None:
        self.schedule.status_polled(cid, now)
        stored = self.service.store.get(cid)
        if (
            stored is None
            or stored.lifecycle_state != "Active"
            or is_self_asserted(stored.signer_kid)
        ):
            return
        reason: str | None
        try:
            endpoint = agent_endpoint(
                stored.manifest["manifest_uri"], stored.capabilities, self.settings.scheme
            )
            url = status_url(endpoint)
            task_id = f"status-{uuid.uuid4().hex[:16]}"
            headers = {**self._headers(task_id), "accept": CONTENT_TYPE}
            del headers["content-type"]
            reply = await self.transport.request(
                origin_of(url), "GET", url, headers, b"", self.settings.timeout
            )
            if reply.status not in (200, 503):  # -02 6.5: a Suspended agent may answer 503
                raise DocumentError(f"/status answered {reply.status}")
            reason = availability_from_status(reply.body, cid, stored.capabilities)
        except (EndpointError, PeerError, DocumentError) as exc:
            log.debug("status poll failed", canonical_id=cid, error=str(exc))
            reason = NOT_RESPONDING  # availability only: never a removal strike
        before = self.service.unavailable_reason(cid)
        self.service.mark_availability(cid, reason)
        report.polled[cid] = reason
        if before != reason:
            log.info(
                "availability changed", canonical_id=cid, available=reason is None, reason=reason
            )

    # -- background tasks -----------------------------------------------------------------
    async def start(self) -> None:
        """Start the refresh loop and the webhook worker (ASGI lifespan startup)."""
        self._wake = asyncio.Event()
        pending = self.outbox.count()
        if pending and self.settings.webhook_url is None:
            log.warning(
                "governance notices are held in the outbox: no [freshness] webhook_url",
                pending=pending,
            )
        self.outbox.prune(self._wall_clock())
        self._tasks = [
            asyncio.create_task(self._refresh_loop(), name="ans-freshness"),
            asyncio.create_task(self._webhook_loop(), name="ans-webhook"),
        ]

    async def stop(self) -> None:
        """Cancel both tasks and close the HTTP clients (ASGI lifespan shutdown)."""
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await self.transport.aclose()

    def close(self) -> None:
        """Close the outbox (after the event loop has finished)."""
        self.outbox.close()

    async def _refresh_loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("freshness round failed")
            nxt = self.schedule.next_due()
            delay = MAX_SLEEP if nxt is None else nxt - self.monotonic()
            await asyncio.sleep(min(max(delay, 0.01), MAX_SLEEP))

    async def _webhook_loop(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            try:
                await self.delivery.deliver_due()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("webhook delivery round failed")
            nxt = self.outbox.next_attempt_at() if self.settings.webhook_url else None
            delay = WEBHOOK_IDLE if nxt is None else nxt - self._wall_clock()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(max(delay, 0.01), WEBHOOK_IDLE))
