"""Wiring of the request log and the metrics to one running service: the
gauges read at scrape time and the audit log's observer (``ans serve``)."""

from __future__ import annotations

from .config import Config
from .http2_defences.connections import open_connections
from .metrics import Metrics
from .request_log import RequestLog, RequestLogSettings
from .service import AnsService


def build_request_log(config: Config, service: AnsService) -> RequestLog:
    """The request log and metrics of ``service`` as ``config`` asks."""
    metrics = Metrics()
    metrics.gauge("ans_agents_indexed", "Agents in the registry index", lambda: len(service.index))
    metrics.gauge(
        "ans_capability_index_size", "Agents in the capability index", lambda: len(service.matcher)
    )
    metrics.gauge(
        "ans_audit_backlog", "Audit records waiting to be written", lambda: service.audit.backlog
    )
    metrics.gauge("ans_connections_open", "Open HTTP/2 and HTTP/1.1 connections", open_connections)
    service.audit.observers.append(metrics.observe_audit)
    service.discovery.scans.observers.append(metrics.scan_batch.observe)
    settings = RequestLogSettings(
        enabled=config.request_log,
        sample=config.request_log_sample,
        per_second=config.request_log_per_second,
        log_intents=config.log_intents,
    )
    return RequestLog(settings, metrics)
