"""The heartbeat TTL sweeper: every ``[mcp] sweep_interval`` seconds, remove
the announced agents whose last valid announcement is older than
``ttl_seconds`` (:meth:`~ans.mcp.registry.McpRegistry.sweep`). Every worker
and node may run one: the trust store lets exactly one of them remove each
agent. Reads never wait for it: a stale agent is filtered out by its
``last_seen`` at read time, so the sweeper only makes the removal durable,
audited and visible in the change feed (and to AGTP DISCOVER).
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from .registry import McpRegistry

log = structlog.get_logger("ans.mcp")


class McpSweeper:
    """A :class:`ans.surfaces.mount.Background` task."""

    def __init__(self, registry: McpRegistry) -> None:
        self.registry = registry
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="mcp-ttl-sweeper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        interval = self.registry.settings.sweep_interval
        while True:
            await asyncio.sleep(interval)
            try:
                removed = await asyncio.to_thread(self.registry.sweep)
            except Exception:
                log.exception("MCP TTL sweep failed; retrying next interval")
                continue
            if removed:
                log.info("MCP agents removed after their TTL", count=removed)
