"""The per-Agent-ID token bucket, its audit de-duplication, the enumeration
signal and the memory bound, all on a fake monotonic clock."""

from __future__ import annotations

from dataclasses import replace

from ans.governance.ratelimit import RateLimiter, RateLimitSettings


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


SETTINGS = RateLimitSettings(rate=2.0, burst=3, enumeration_threshold=0, audit_window=10.0)


def limiter(**kw: object) -> tuple[RateLimiter, FakeClock]:
    clock = FakeClock()
    return RateLimiter(replace(SETTINGS, **kw), clock), clock  # type: ignore[arg-type]


def test_burst_then_refused_with_retry_after() -> None:
    rl, clock = limiter()
    assert [rl.check("a", "DISCOVER").allowed for _ in range(3)] == [True] * 3
    d = rl.check("a", "DISCOVER")
    assert not d.allowed and d.retry_after == 1  # 1 token at 2/s = 0.5 s -> ceil -> 1
    clock.t += 0.5
    assert rl.check("a", "DISCOVER").allowed  # refilled one token
    assert not rl.check("a", "DISCOVER").allowed


def test_retry_after_is_ceil_of_seconds_to_one_token() -> None:
    rl, clock = limiter(rate=0.25, burst=1)
    assert rl.check("a", "DESCRIBE").allowed
    assert rl.check("a", "DESCRIBE").retry_after == 4
    clock.t += 1.5
    assert rl.check("a", "DESCRIBE").retry_after == 3  # 2.5 s left -> 3


def test_buckets_are_per_agent_and_exempt_ids_are_never_limited() -> None:
    rl, _ = limiter(burst=1, exempt_agent_ids=("gov",))
    assert rl.check("a", "DISCOVER").allowed and not rl.check("a", "DISCOVER").allowed
    assert rl.check("b", "DISCOVER").allowed
    assert all(rl.check("gov", "ACTIVATE").allowed for _ in range(100))


def test_disabled() -> None:
    rl, _ = limiter(burst=1, enabled=False)
    assert all(rl.check("a", "DISCOVER").allowed for _ in range(50))
    assert len(rl) == 0


def test_one_audit_note_per_window_with_suppressed_count() -> None:
    rl, clock = limiter(burst=1, rate=0.01)
    rl.check("a", "DISCOVER")
    first = rl.check("a", "DISCOVER")
    assert [n.event for n in first.notes] == ["rate_limited"]
    assert first.notes[0].fields["suppressed"] == 0
    quiet = [rl.check("a", "DISCOVER") for _ in range(25)]
    assert all(not d.allowed and d.notes == () for d in quiet)
    clock.t += 10.0  # the audit window is over; still no token (0.1 of one)
    nxt = rl.check("a", "DISCOVER")
    assert not nxt.allowed
    assert [(n.event, n.fields["suppressed"]) for n in nxt.notes] == [("rate_limited", 25)]


def test_suppressed_count_written_on_next_admitted_request_or_flush() -> None:
    rl, clock = limiter(burst=1, rate=1.0)
    rl.check("a", "DISCOVER")
    for _ in range(4):
        rl.check("a", "DISCOVER")  # 1 recorded + 3 suppressed
    clock.t += 11.0
    ok = rl.check("a", "DISCOVER")
    assert ok.allowed
    assert [(n.fields["suppressed"], n.fields["summary"]) for n in ok.notes] == [(3, True)]
    rl.check("b", "DISCOVER")
    for _ in range(3):
        rl.check("b", "DISCOVER")
    assert [(n.fields["agent_id"], n.fields["suppressed"]) for n in rl.flush()] == [("b", 2)]
    assert rl.flush() == []


def test_enumeration_signal_once_per_window_served_or_not() -> None:
    rl, clock = limiter(burst=2, rate=0.01, enumeration_threshold=10, enumeration_window=5.0)
    events = []
    for _ in range(30):
        clock.t += 0.01
        events += [n.event for n in rl.check("a", "DISCOVER").notes]
    # counted although most were refused; reported once in this window
    assert events.count("enumeration_suspected") == 1
    clock.t += 5.0
    for _ in range(10):
        events += [n.event for n in rl.check("a", "DISCOVER").notes]
    assert events.count("enumeration_suspected") == 2
    # other methods are not counted
    rl2, _ = limiter(enumeration_threshold=3, exempt_agent_ids=("x",))
    assert not any(rl2.check("x", "ACTIVATE").notes for _ in range(10))
    assert any(rl2.check("x", "DISCOVER").notes for _ in range(3))  # exempt from 429 only


def test_enumeration_below_threshold_is_quiet() -> None:
    rl, clock = limiter(enabled=False, enumeration_threshold=10, enumeration_window=1.0)
    for _ in range(60):  # 5 per second, steady: below 10 per 1 s
        clock.t += 0.2
        assert rl.check("a", "DISCOVER").notes == ()


def test_memory_bound_evicts_idle_first() -> None:
    rl, clock = limiter(burst=2, rate=1.0, max_tracked=3)
    rl.check("busy", "DISCOVER")
    rl.check("busy", "DISCOVER")  # bucket empty: not idle
    rl.check("idle1", "DISCOVER")
    rl.check("idle2", "DISCOVER")
    clock.t += 1.0  # idle1/idle2 refill to full; busy only to 1 of 2
    rl.check("new", "DISCOVER")
    assert len(rl) == 3
    # busy kept its state (one token left, then refused); idle1 was evicted
    assert rl.check("busy", "DISCOVER").allowed
    assert not rl.check("busy", "DISCOVER").allowed
    for i in range(1000):
        rl.check(f"flood-{i}", "DISCOVER")
    assert len(rl) == 3
