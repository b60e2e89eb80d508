"""PeerHealth on its own: when a peer starts being skipped, who probes it,
how the skip period grows, and what does not count (a fake monotonic clock)."""

from __future__ import annotations

from ans.federation.health import PeerHealth
from ans.federation.peers import FederationSettings

URL = "http://b"
SETTINGS = FederationSettings(
    deadline=1.0, failures_before_skip=3, skip_seconds=5.0, max_skip_seconds=12.0
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def opened(clock: Clock) -> PeerHealth:
    health = PeerHealth(SETTINGS, clock)
    assert health.failed(URL, "peer_timeout", probe=False) is None
    assert health.failed(URL, "peer_unreachable", probe=False) is None
    assert health.failed(URL, "peer_timeout", probe=False) == 5.0
    return health


def test_consecutive_down_failures_start_a_skip_period() -> None:
    clock = Clock()
    health = opened(clock)
    skip = health.check(URL)
    assert skip is not None and not skip.probing
    assert (skip.remaining, skip.failures, skip.last_code) == (5.0, 3, "peer_timeout")
    assert "skipped for 5.0s more after 3 consecutive failures (last: peer_timeout)" in (
        skip.message("b")
    )
    assert health.snapshot()[URL]["state"] == "skipped"


def test_an_answer_in_between_starts_the_count_again() -> None:
    health = PeerHealth(SETTINGS, Clock())
    for _ in range(2):
        health.failed(URL, "peer_timeout", probe=False)
    assert health.answered(URL) is False  # it was failing, not skipped
    for _ in range(2):
        assert health.failed(URL, "peer_timeout", probe=False) is None
    assert health.check(URL) is None


def test_other_failures_do_not_count() -> None:
    health = PeerHealth(SETTINGS, Clock())
    for _ in range(5):
        assert health.failed(URL, "peer_key_unavailable", probe=False) is None
    assert health.check(URL) is None and health.snapshot() == {}


def test_one_query_probes_after_the_period_the_others_keep_skipping() -> None:
    clock = Clock()
    health = opened(clock)
    clock.now += 5.0
    assert health.check(URL) is None and health.probing(URL)  # this query probes
    second = health.check(URL)
    assert second is not None and second.probing
    assert "another query is probing it" in second.message("b")
    assert health.answered(URL) is True  # the probe got an answer
    assert health.check(URL) is None and not health.probing(URL)
    assert health.snapshot() == {}


def test_failed_probes_double_the_period_up_to_the_cap() -> None:
    clock = Clock()
    health = opened(clock)
    periods = []
    for _ in range(3):
        clock.now += 20.0
        assert health.check(URL) is None and health.probing(URL)
        periods.append(health.failed(URL, "peer_timeout", probe=True))
        assert not health.probing(URL)
    assert periods == [10.0, 12.0, 12.0]
    clock.now += 11.9
    assert health.check(URL) is not None


def test_an_older_request_timing_out_does_not_extend_the_period() -> None:
    clock = Clock()
    health = opened(clock)
    clock.now += 1.0
    assert health.failed(URL, "peer_timeout", probe=False) is None  # sent before it opened
    skip = health.check(URL)
    assert skip is not None and skip.remaining == 4.0 and skip.failures == 4


def test_a_probe_that_never_reports_stops_blocking_the_next() -> None:
    clock = Clock()
    health = opened(clock)
    clock.now += 5.0
    assert health.check(URL) is None  # a probe whose query then vanished
    clock.now += SETTINGS.deadline + 0.5
    assert health.check(URL) is not None  # still within the probe's time
    clock.now += 0.6
    assert health.check(URL) is None and health.probing(URL)


def test_a_probe_released_without_an_outcome_lets_the_next_query_probe() -> None:
    clock = Clock()
    health = opened(clock)
    clock.now += 5.0
    assert health.check(URL) is None
    health.release(URL)
    assert health.check(URL) is None and health.probing(URL)


def test_zero_never_skips() -> None:
    health = PeerHealth(FederationSettings(failures_before_skip=0), Clock())
    for _ in range(10):
        assert health.failed(URL, "peer_timeout", probe=False) is None
    assert health.check(URL) is None
