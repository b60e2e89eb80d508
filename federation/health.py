"""Which peers to leave out for a while, so that a dead or hung peer does
not cost every federated query its whole timeout.

After ``failures_before_skip`` consecutive forwards to a peer timed out or
were refused, the peer is skipped for ``skip_seconds``. When that period is
over, the next query that would ask the peer asks it as a *probe*; other
queries keep skipping it until the probe's outcome is known. Any answer (even
an error status or a bad signature: the peer is up) ends the skip period; a
failed probe starts a new one, twice as long, up to ``max_skip_seconds``.
(The federator does not report timeouts under a deadline that the caller's
federation budget cut short: those say nothing about the peer.)
Pure bookkeeping over an injected monotonic clock; the federator reports
outcomes and audits the transitions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .peers import FederationSettings

# Outcomes that say the peer is down or hung. Everything else that comes back
# from a peer says it is up; a key that cannot be fetched says neither (the key
# cache has its own retry interval).
DOWN_CODES = frozenset({"peer_timeout", "peer_unreachable"})


@dataclass(frozen=True, slots=True)
class Skip:
    """Why a peer is not asked now."""

    remaining: float  # seconds until it may be probed (0 while a probe runs)
    failures: int  # consecutive failures so far
    last_code: str
    probing: bool  # another query is probing it right now

    def message(self, name: str) -> str:
        why = f"{self.failures} consecutive failures (last: {self.last_code})"
        if self.probing:
            return f"peer {name}: skipped after {why}; another query is probing it"
        return f"peer {name}: skipped for {self.remaining:.1f}s more after {why}"


@dataclass(slots=True)
class _State:
    failures: int = 0
    skip_for: float = 0.0  # the current skip period; 0 while the peer is asked
    skip_until: float = 0.0
    probe_since: float | None = None
    last_code: str = ""


class PeerHealth:
    def __init__(self, settings: FederationSettings, monotonic: Callable[[], float]) -> None:
        self._settings = settings
        self._now = monotonic
        self._states: dict[str, _State] = {}
        # A probe whose outcome never came (its query was cancelled) stops
        # blocking the next probe after this long.
        self._probe_limit = settings.deadline + 1.0

    def check(self, url: str) -> Skip | None:
        """None: ask the peer (as a probe when a skip period just ended, see
        :meth:`probing`); otherwise why it is skipped."""
        st = self._states.get(url)
        if st is None or st.skip_for == 0.0:
            return None
        now = self._now()
        if st.probe_since is not None and now - st.probe_since < self._probe_limit:
            return Skip(max(st.skip_until - now, 0.0), st.failures, st.last_code, True)
        if now < st.skip_until:
            return Skip(st.skip_until - now, st.failures, st.last_code, False)
        st.probe_since = now
        return None

    def probing(self, url: str) -> bool:
        """Whether a query is probing this peer (set by :meth:`check`)."""
        st = self._states.get(url)
        return st is not None and st.probe_since is not None

    def answered(self, url: str) -> bool:
        """The peer answered. True when that ends a skip period."""
        st = self._states.pop(url, None)
        return st is not None and st.skip_for > 0.0

    def failed(self, url: str, code: str, *, probe: bool) -> float | None:
        """A forward failed with ``code``; ``probe`` says whether it was the
        probe. Returns the new skip period when this failure starts one."""
        if code not in DOWN_CODES:
            self.release(url)
            return None
        limit = self._settings.failures_before_skip
        if limit == 0:
            return None
        st = self._states.setdefault(url, _State())
        st.failures += 1
        st.last_code = code
        if st.skip_for > 0.0:
            if not probe:  # an older request timing out: the period stands
                return None
            st.probe_since = None
            st.skip_for = min(st.skip_for * 2.0, self._settings.max_skip_seconds)
        elif st.failures >= limit:
            st.skip_for = self._settings.skip_seconds
        else:
            return None
        st.skip_until = self._now() + st.skip_for
        return st.skip_for

    def release(self, url: str) -> None:
        """A probe ended without telling whether the peer is up."""
        st = self._states.get(url)
        if st is not None:
            st.probe_since = None

    def snapshot(self) -> dict[str, dict[str, float | int | str]]:
        """Skipped peers and peers with recent failures, for ``/healthz``."""
        now = self._now()
        return {
            url: {
                "state": "skipped" if st.skip_for else "failing",
                "consecutive_failures": st.failures,
                "last_failure": st.last_code,
                "skipped_for_seconds": round(max(st.skip_until - now, 0.0), 3),
            }
            for url, st in sorted(self._states.items())
        }
