"""/metrics, /readyz and the request log of a real server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ans.metrics import Metrics
from ans.request_log import RequestLog, RequestLogSettings
from tools.launcher import RunningServer, start_server, stop_server

INTENT = "translate a legal contract from German to English"
STDOUT_LINES = ("ANS ",)  # the ready and demo lines ans serve prints on stdout (merged here)


def headers(scope: str) -> dict[str, str]:
    return {
        "agent-id": "agtp://probe.example/agents/metrics",
        "principal-id": "ops",
        "authority-scope": scope,
        "content-type": "application/agtp+json",
    }


def discover(client: httpx.Client, url: str, scope: str = "discovery:query") -> httpx.Response:
    body = orjson.dumps({"method": "DISCOVER", "parameters": {"intent": INTENT}})
    return client.request("DISCOVER", url + "/", content=body, headers=headers(scope))


def scrape(client: httpx.Client, url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    resp = client.get(url + "/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            out.setdefault(sample.name, {})[labels] = sample.value
    return out


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def ans(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("observe")
    cfg = root / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n")
    srv = start_server(root / "data", "--demo", "--config", str(cfg), "--log-format", "json")
    yield srv
    stop_server(srv)


def test_metrics_count_requests_refusals_and_state(ans: RunningServer) -> None:
    with httpx.Client(http2=True, timeout=10) as client:
        assert discover(client, ans.url).status_code == 200
        assert discover(client, ans.url, scope="agents:delegate").status_code == 451
        m = scrape(client, ans.url)
    requests = m["ans_requests_total"]
    key_ok = (("method", "DISCOVER"), ("status", "200"), ("surface", "agtp"))
    key_451 = (("method", "DISCOVER"), ("status", "451"), ("surface", "agtp"))
    assert requests[key_ok] >= 1 and requests[key_451] >= 1
    latency = m["ans_request_duration_seconds_count"]
    assert latency[(("method", "DISCOVER"), ("surface", "agtp"))] >= 2
    assert m["ans_discover_results_count"][()] >= 1
    assert m["ans_audit_events_total"][(("event", "scope_violation"),)] >= 1
    assert m["ans_agents_indexed"][()] == 64
    assert m["ans_connections_open"][()] >= 1  # the scraping connection itself
    store_calls = m["ans_store_seconds_count"]
    assert store_calls[(("op", "max_seq"),)] >= 1  # /readyz and the follower ask the store
    assert m["ans_change_feed_lag"][()] == 0  # one process: nothing to follow
    failed_writes = [x for x in ans.output if "audit" in x and "fail" in x][:5]
    assert m["ans_audit_write_failures_total"][()] == 0, failed_writes


def test_the_scan_batch_histogram_counts_every_plain_discover_once(ans: RunningServer) -> None:
    """``ans_discover_scan_batch``: each plain DISCOVER of an exhaustively scored
    catalog is in exactly one scan, so the sizes observed add up to the
    DISCOVERs sent, however the loop gathered them; a refused one is in none."""

    async def burst(n: int) -> list[int]:
        body = orjson.dumps({"method": "DISCOVER", "parameters": {"intent": INTENT}})
        async with httpx.AsyncClient(http2=True, timeout=10) as client:
            sent = [
                client.request("DISCOVER", ans.url + "/", content=body, headers=headers(scope))
                for scope in ["discovery:query"] * n + ["agents:delegate"]
            ]
            return [r.status_code for r in await asyncio.gather(*sent)]

    with httpx.Client(http2=True, timeout=10) as client:
        before = scrape(client, ans.url)
        assert sorted(asyncio.run(burst(12))) == [200] * 12 + [451]
        after = scrape(client, ans.url)

    def delta(name: str, labels: tuple[tuple[str, str], ...] = ()) -> float:
        return after[name][labels] - before.get(name, {}).get(labels, 0.0)

    assert delta("ans_discover_scan_batch_sum") == 12
    scans = delta("ans_discover_scan_batch_count")
    assert 1 <= scans <= 12
    assert delta("ans_discover_scan_batch_bucket", (("le", "+Inf"),)) == scans


def test_readyz_is_ready_on_a_running_server(ans: RunningServer) -> None:
    resp = httpx.get(ans.url + "/readyz", timeout=10)
    assert resp.status_code == 200
    assert resp.json() == {
        "status": "ready",
        "checks": {"index": "ok", "store": "ok", "audit": "ok"},
        "failing": [],
    }
    assert httpx.get(ans.url + "/healthz", timeout=10).status_code == 200


def test_request_log_is_one_json_line_per_request_without_the_intent(ans: RunningServer) -> None:
    with httpx.Client(http2=True, timeout=10) as client:
        assert discover(client, ans.url, scope="agents:delegate").status_code == 451

    def lines() -> list[dict[str, Any]]:
        out = []
        for line in list(ans.output):
            if line.startswith(STDOUT_LINES):
                continue
            out.append(orjson.loads(line))  # every log line is JSON in this stream
        return out

    wait_for(lambda: any(r.get("code") == "scope_violation" for r in lines()))
    refused = [r for r in lines() if r.get("event") == "request" and r.get("status") == 451]
    line = refused[-1]
    assert line["method"] == "DISCOVER" and line["surface"] == "agtp"
    assert line["agent_id"] == "agtp://probe.example/agents/metrics"
    assert line["client"] == "127.0.0.1" and line["duration_ms"] > 0
    assert all(INTENT not in orjson.dumps(r).decode() for r in lines())


class Lines:
    """A logger that keeps what it is given."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append({"event": event, **fields})


def test_log_intents_and_rate_limited_lines() -> None:
    now = [0.0]
    out = Lines()
    log = RequestLog(
        RequestLogSettings(per_second=2.0, log_intents=True, sample=0.0),
        Metrics(),
        clock=lambda: now[0],
        logger=out,
    )
    for _ in range(5):  # errors are never sampled out; 2 a second pass the bucket
        log.observe("agtp", "DISCOVER", 451, 0.001, "127.0.0.1", {"intent": "x" * 900})
    log.observe("agtp", "DISCOVER", 200, 0.001, "127.0.0.1", {})  # sampled out (0.0)
    now[0] = 1.0
    log.observe("agtp", "DISCOVER", 404, 0.001, "127.0.0.1", {})
    seen = out.lines
    assert len(seen) == 3
    assert len(seen[0]["intent"]) == 500  # bounded
    assert seen[2]["suppressed"] == 3  # the withheld lines are reported


def test_metrics_sum_every_worker(tmp_path_factory: pytest.TempPathFactory) -> None:
    """With --workers 2 a scrape of either worker counts the requests of both."""
    root = tmp_path_factory.mktemp("observe-workers")
    cfg = root / "ans.toml"
    cfg.write_text("[rate_limit]\nenabled = false\n")
    srv = start_server(root / "data", "--demo", "--config", str(cfg), "--workers", "2")
    try:
        sent = 12
        for _ in range(sent):  # a new connection each: SO_REUSEPORT spreads them
            with httpx.Client(http2=True, timeout=10) as client:
                assert discover(client, srv.url).status_code == 200
        key = (("method", "DISCOVER"), ("status", "200"), ("surface", "agtp"))
        seen = set()
        for _ in range(6):
            with httpx.Client(http2=True, timeout=10) as client:
                seen.add(scrape(client, srv.url)["ans_requests_total"][key])
        assert seen == {sent}
    finally:
        stop_server(srv)
