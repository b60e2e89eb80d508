"""The per-Agent-ID token bucket, its audit de-duplication, the enumeration
signal and the memory bound, all on a fake monotonic clock; the client-address
keys (IPv4-mapped, IPv6 /64), exempt networks and per-address settings."""

from __future__ import annotations

import ipaddress
import math
from dataclasses import replace

import pytest
from ans.governance.ratelimit import (
    RateLimiter,
    RateLimitSettings,
    address_key,
    client_ip,
    parse_networks,
)


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


# -- per client address -------------------------------------------------------------------


def key_of(address: str | None) -> str | None:
    ip = client_ip(address)
    return None if ip is None else address_key(ip)


def test_address_keys() -> None:
    assert key_of("203.0.113.5") == "203.0.113.5"
    assert key_of("::ffff:203.0.113.5") == "203.0.113.5"  # IPv4-mapped: the IPv4 address
    # IPv6: the /64, so a host rotating its interface id stays in one bucket
    assert key_of("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert key_of("2001:db8:1:2:ffff:eeee:dddd:cccc") == "2001:db8:1:2::/64"
    assert key_of("2001:db8:1:3::1") == "2001:db8:1:3::/64"
    assert key_of("fe80::1%eth0") == "fe80::/64"
    assert key_of("::1") == "::/64"
    # not an IP address: no key, not limited
    for other in (None, "", "/run/ans.sock", "unix:/tmp/s", "?", "localhost"):
        assert key_of(other) is None


def test_parse_networks() -> None:
    nets = parse_networks(["10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "10.1.2.3/16"])
    assert [str(n) for n in nets] == ["10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32", "10.1.0.0/16"]
    # an IPv4-mapped IPv6 network is the IPv4 one, so it matches client_ip's addresses
    (mapped,) = parse_networks(["::ffff:192.0.2.0/120"])
    assert mapped == ipaddress.ip_network("192.0.2.0/24")
    assert client_ip("::ffff:192.0.2.9") in mapped
    for bad in ("10.0.0.0/33", "not-an-ip", "", "2001:db8::/129"):
        with pytest.raises(ValueError, match=repr(bad)):
            parse_networks(["10.0.0.0/8", bad])


def test_per_address_settings() -> None:
    s = RateLimitSettings(
        rate=5.0, burst=6, per_address_rate=7.0, per_address_burst=8, exempt_agent_ids=("a",)
    )
    p = s.per_address()
    assert (p.enabled, p.rate, p.burst, p.enumeration_threshold) == (True, 7.0, 8, 0)
    assert p.exempt_agent_ids == () and (p.max_tracked, p.audit_window) == (10_000, 60.0)
    assert not replace(s, per_address_rate=0.0).per_address().enabled
    assert not replace(s, enabled=False).per_address().enabled
    defaults = RateLimitSettings()
    assert (defaults.per_address_rate, defaults.per_address_burst) == (200.0, 400)
    assert defaults.exempt_addresses == () and defaults.problems() == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"per_address_rate": -1.0}, "per_address_rate"),
        ({"per_address_rate": math.inf}, "per_address_rate"),
        ({"per_address_rate": math.nan}, "per_address_rate"),
        ({"per_address_burst": 0}, "per_address_burst"),
        ({"exempt_addresses": ("10.0.0.0/8",)}, "exempt_addresses"),
    ],
)
def test_per_address_problems(change: dict[str, object], message: str) -> None:
    problems = replace(RateLimitSettings(), **change).problems()  # type: ignore[arg-type]
    assert len(problems) == 1 and message in problems[0]


def test_an_address_limiter_names_its_key_in_summaries() -> None:
    clock = FakeClock()
    settings = replace(SETTINGS, per_address_burst=1).per_address()
    rl = RateLimiter(settings, clock, key_field="client_address")
    rl.check("192.0.2.1", "DISCOVER")
    for _ in range(3):
        rl.check("192.0.2.1", "DISCOVER")
    assert [n.fields for n in rl.flush()] == [
        {"client_address": "192.0.2.1", "suppressed": 2, "summary": True}
    ]


def test_costs_and_debits_for_work_already_done() -> None:
    rl, clock = limiter()  # 2 tokens a second, burst 3
    assert rl.check("a", "DISCOVER", cost=2).allowed
    assert not rl.check("a", "DISCOVER", cost=2).allowed  # 1 left
    assert rl.check("a", "DISCOVER").allowed
    rl, clock = limiter()
    assert rl.check("b", "DISCOVER", cost=50).allowed  # never more than a full bucket
    # A debit after the fact may take the bucket below zero, down to -burst:
    rl.debit("b", 100)
    d = rl.check("b", "DISCOVER")
    assert not d.allowed and d.retry_after == 2  # from -3 to 1 token at 2/s
    clock.t += 2.0
    assert rl.check("b", "DISCOVER").allowed
    rl.debit("unknown", 5)  # nothing to debit: no bucket is made for it
    assert len(rl) == 1
    exempt, _ = limiter(exempt_agent_ids=("x",))
    exempt.check("x", "DISCOVER")
    exempt.debit("x", 100)
    assert all(exempt.check("x", "DISCOVER").allowed for _ in range(10))
