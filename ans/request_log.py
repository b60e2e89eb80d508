"""One structured line per answered request, and the metrics of that request.

The line (logger ``ans.request``, event ``request``) carries the method, the
surface, the status, the error code, the duration, the client address, the
Agent-ID and the number of results; never the intent text unless
``[logging] log_intents = true`` (a query can carry what the asker is working
on). Successful answers are sampled (``request_log_sample``, 1.0 = all);
every line, errors included, passes a token bucket of
``request_log_per_second`` lines a second (burst of the same size) so a flood
cannot flood the log: the lines it withholds are counted and reported on the
next line that goes out (``suppressed``).

What a request's handlers learn on the way (the Agent-ID once authenticated,
the error code, the result count, the intent) goes into :data:`NOTE`, a
per-request dict in a context variable, so the framing code that times the
request does not parse anything twice.
"""

from __future__ import annotations

import contextvars
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from .metrics import Metrics

log = structlog.get_logger("ans.request")

NOTE: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "ans_request_note", default=None
)
MAX_INTENT = 500  # characters of an intent in a log line (with log_intents)


def note(**fields: Any) -> None:
    """Record facts about the request being answered (no-op outside one)."""
    current = NOTE.get()
    if current is not None:
        current.update(fields)


@dataclass(frozen=True, slots=True)
class RequestLogSettings:
    enabled: bool = True
    sample: float = 1.0  # share of successful answers logged
    per_second: float = 200.0  # lines a second at most (token bucket)
    log_intents: bool = False


class RequestLog:
    def __init__(
        self,
        settings: RequestLogSettings,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
        logger: Any = None,
    ) -> None:
        self.settings = settings
        self.log = logger if logger is not None else log
        self.metrics = metrics
        self._clock = clock
        self._rng = rng
        self._lock = threading.Lock()
        self._tokens = settings.per_second
        self._last = clock()
        self._suppressed = 0

    def _admit(self, ok: bool) -> int | None:
        """None: do not log this one; else the count withheld before it."""
        s = self.settings
        if not s.enabled or (ok and s.sample < 1.0 and self._rng() >= s.sample):
            return None
        with self._lock:
            now = self._clock()
            self._tokens = min(s.per_second, self._tokens + (now - self._last) * s.per_second)
            self._last = now
            if self._tokens < 1.0:
                self._suppressed += 1
                return None
            self._tokens -= 1.0
            suppressed, self._suppressed = self._suppressed, 0
            return suppressed

    def observe(
        self,
        surface: str,
        method: str,
        status: int,
        seconds: float,
        client: str | None,
        facts: dict[str, Any] | None,
    ) -> None:
        """Count the request in the metrics and log its line (if admitted);
        never raises (observing must not break an answer)."""
        try:
            self._observe(surface, method, status, seconds, client, facts or {})
        except Exception as exc:  # pragma: no cover - defensive
            log.error("request not observed", error=repr(exc)[:300])

    def _observe(
        self,
        surface: str,
        method: str,
        status: int,
        seconds: float,
        client: str | None,
        facts: dict[str, Any],
    ) -> None:
        code = facts.get("code")
        results = facts.get("results")
        self.metrics.observe_request(surface, method, status, seconds, code, results)
        suppressed = self._admit(status < 400)
        if suppressed is None:
            return
        line: dict[str, Any] = {
            "method": method,
            "surface": surface,
            "status": status,
            "duration_ms": round(seconds * 1000, 3),
            "client": client,
        }
        for name in ("code", "agent_id", "results", "task_id", "framing"):
            if facts.get(name) is not None:
                line[name] = facts[name]
        if self.settings.log_intents and isinstance(facts.get("intent"), str):
            line["intent"] = facts["intent"][:MAX_INTENT]
        if suppressed:
            line["suppressed"] = suppressed
        self.log.info("request", **line)
