"""Prometheus metrics (prometheus-client), served at ``/metrics`` in the text
exposition format.

One :class:`Metrics` object per process holds the counters and histograms;
:meth:`Metrics.observe_request` is called once per answered request (every
surface and both framings, with the request log), the audit log reports every
record through :meth:`Metrics.observe_audit` (rate-limit refusals, scope and
zone violations, signature failures, federation outcomes per peer are all
audited), and the store is timed by :class:`TimedStore`. Gauges that describe
state (agents indexed, open connections, audit backlog, change-feed lag) are
read when scraped.

With several worker processes, ``PROMETHEUS_MULTIPROC_DIR`` names a directory
every worker writes its samples to, and a scrape of any worker aggregates all
of them (prometheus-client's multiprocess mode).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import structlog
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE_LATEST", "Metrics", "TimedStore", "surface_of"]
log = structlog.get_logger("ans.metrics")

# The store is opened before the server's Metrics exist (and by ans import):
# its latency histogram lives in a registry of its own, exposed with them.
STORE_REGISTRY = CollectorRegistry(auto_describe=True)
STORE_BUCKETS = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0)
STORE_LATENCY = Histogram(
    "ans_store_seconds",
    "Registry store call latency, by operation",
    ["op"],
    buckets=STORE_BUCKETS,
    registry=STORE_REGISTRY,
)
# How many store changes a worker or node had not yet applied when it last
# checked the change feed (before a DISCOVER, or on its idle poll).
FEED_LAG = Gauge(
    "ans_change_feed_lag",
    "Store changes not yet applied by this process at its last feed check",
    registry=STORE_REGISTRY,
    multiprocess_mode="max",
)
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
RESULT_BUCKETS = (0, 1, 2, 3, 5, 10, 20, 50, 100)
SCAN_BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64)
# Surfaces by path prefix; anything else is AGTP (any path with an AGTP method).
SURFACES = (
    ("/discovery/", "profile"),
    ("/haidip/", "haidip"),
    ("/mcp/", "mcp"),
    ("/.well-known/", "wellknown"),
    ("/metrics", "ops"),
    ("/healthz", "ops"),
    ("/readyz", "ops"),
)


def surface_of(path: str, agtp: bool) -> str:
    """The surface a request addressed (``agtp`` when it carried an AGTP method)."""
    if agtp:
        return "agtp"
    for prefix, name in SURFACES:
        if path.startswith(prefix):
            return name
    return "http"


class _StateCollector(Collector):
    """Gauges read at scrape time from callbacks (name -> (help, read))."""

    def __init__(self, gauges: dict[str, tuple[str, Callable[[], float]]]) -> None:
        self.gauges = gauges

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for name, (doc, read) in self.gauges.items():
            try:
                value = float(read())
            except Exception as exc:
                log.warning("metrics gauge unreadable", gauge=name, error=str(exc)[:200])
                continue
            yield GaugeMetricFamily(name, doc, value=value)


class Metrics:
    def __init__(self, multiproc_dir: str | None = None) -> None:
        self.multiproc_dir = multiproc_dir or os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self.requests = Counter(
            "ans_requests",
            "Requests answered, by surface, method and status",
            ["surface", "method", "status"],
            registry=reg,
        )
        self.latency = Histogram(
            "ans_request_duration_seconds",
            "Time from the request's arrival to its answer, by surface and method",
            ["surface", "method"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.results = Histogram(
            "ans_discover_results",
            "Results returned per successful DISCOVER",
            buckets=RESULT_BUCKETS,
            registry=reg,
        )
        self.scan_batch = Histogram(
            "ans_discover_scan_batch",
            "DISCOVERs per exhaustive scan: those gathered in one event-loop turn "
            "when they shared it, 1 for a DISCOVER scanned alone",
            buckets=SCAN_BATCH_BUCKETS,
            registry=reg,
        )
        self.audit_events = Counter(
            "ans_audit_events",
            "Audit records by event (rate_limited, scope_violation, activation, ...)",
            ["event"],
            registry=reg,
        )
        self.audit_failures = Counter(
            "ans_audit_write_failures",
            "Audit records that could not be written when appended (kept in the backlog)",
            registry=reg,
        )
        self.rate_limited = Counter(
            "ans_rate_limited",
            "Requests refused by a rate limit (429)",
            ["surface"],
            registry=reg,
        )
        self.signature_failures = Counter(
            "ans_signature_failures",
            "Signatures that did not verify, by what carried them",
            ["kind"],
            registry=reg,
        )
        self.federation = Counter(
            "ans_federation_outcomes",
            "Federated DISCOVER outcomes per peer (ok, timeout, dropped results, ...)",
            ["peer", "outcome"],
            registry=reg,
        )
        self._gauges: dict[str, tuple[str, Callable[[], float]]] = {}
        if self.multiproc_dir is None:
            reg.register(_StateCollector(self._gauges))
    # -- gauges -------------------------------------------------------------------------
    def gauge(self, name: str, doc: str, read: Callable[[], float]) -> None:
        """A gauge whose value ``read()`` returns at scrape time."""
        self._gauges[name] = (doc, read)

    # -- events ---------------------------------------------------------------------------
    def observe_request(
        self,
        surface: str,
        method: str,
        status: int,
        seconds: float,
        code: str | None = None,
        results: int | None = None,
    ) -> None:
        self.requests.labels(surface, method, str(status)).inc()
        self.latency.labels(surface, method).observe(seconds)
        if status == 429:
            self.rate_limited.labels(surface).inc()
        if results is not None and method == "DISCOVER" and status == 200:
            self.results.observe(results)
        if code in ("signature_invalid", "unknown_signing_key"):
            self.signature_failures.labels(f"{method.lower()}_request").inc()

    def observe_audit(self, entry: dict[str, Any], written: bool) -> None:
        """Every audit record, as :class:`ans.governance.audit.AuditLog` appends it."""
        event = str(entry.get("event", "unknown"))[:64]
        self.audit_events.labels(event).inc()
        if not written:
            self.audit_failures.inc()
        if event in ("federation_forward", "federation_drop"):
            peer = str(entry.get("peer", ""))[:200]
            outcome = entry.get("outcome") if event == "federation_forward" else entry.get("code")
            self.federation.labels(peer, str(outcome)[:64]).inc()
            if str(outcome).startswith("signature") or outcome == "peer_signature_invalid":
                self.signature_failures.labels("peer_result").inc()

    # -- exposition -------------------------------------------------------------------------
    def exposition(self) -> bytes:
        """The text exposition of this process (all workers in multiprocess mode)."""
        if self.multiproc_dir is None:
            return generate_latest(self.registry) + generate_latest(STORE_REGISTRY)
        merged = CollectorRegistry()
        MultiProcessCollector(merged, path=self.multiproc_dir)  # type: ignore[no-untyped-call]
        merged.register(_StateCollector(self._gauges))
        return generate_latest(merged)


class TimedStore:
    """A registry store whose calls are timed into ``ans_store_seconds``
    (everything else passes through unchanged)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr) or name.startswith("_"):
            return attr
        histogram = STORE_LATENCY.labels(name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return attr(*args, **kwargs)  # a scan's iterator is timed to its first row
            finally:
                histogram.observe(time.perf_counter() - started)

        # Kept on the proxy: later calls (max_seq before every DISCOVER with
        # workers) find it without another lookup, closure or label resolution.
        self.__dict__[name] = timed
        return timed
