"""What one federated forward is made of: the :class:`Plan` (whom to ask,
until when, with which path), :class:`Dispatched` (every request is on the
way), the :class:`Fanout` under way and what it :class:`Gathered`. The
:class:`~.federator.Federator` makes and fills them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ans.protocol.messages import DiscoverRequest

from .health import Skip
from .peers import Peer
from .verify import Candidate, VerifiedAnswer


@dataclass(frozen=True, slots=True)
class Plan:
    peers: tuple[tuple[int, Peer], ...]
    deadline: float
    path: tuple[str, ...]  # the path we send: the incoming one plus us
    skipped: tuple[tuple[Peer, Skip], ...] = ()  # eligible, but left out for now
    probes: frozenset[str] = frozenset()  # URLs of peers asked to end a skip period
    # The caller's AGTP-Federation-Budget-Ms cut the deadline short: a peer
    # timing out then says nothing about the peer (and must not let a caller
    # get a peer skipped for everyone by sending tiny budgets).
    budget_limited: bool = False


class Dispatched:
    """Set once every peer of a fan-out has its request on the way (or failed
    before). Lets the caller do CPU-bound local work after the peers were
    asked, on the event loop, instead of racing them for the GIL."""

    def __init__(self) -> None:
        self._left = 0
        self._event = asyncio.Event()

    def expect(self, n: int) -> None:
        self._left = n
        if n == 0:
            self._event.set()

    def one_sent(self) -> None:
        self._left -= 1
        if self._left <= 0:
            self._event.set()

    @property
    def done(self) -> bool:
        return self._event.is_set()

    async def wait(self, timeout: float) -> bool:
        """True when every request went out within ``timeout`` seconds."""
        try:
            async with asyncio.timeout(timeout):
                await self._event.wait()
        except TimeoutError:
            return False
        return True


class SentOnce:
    """Counts one peer as dispatched, once, whichever path it takes."""

    __slots__ = ("_dispatched",)

    def __init__(self, dispatched: Dispatched | None) -> None:
        self._dispatched = dispatched

    def __call__(self) -> None:
        if self._dispatched is not None:
            d, self._dispatched = self._dispatched, None
            d.one_sent()


@dataclass
class Gathered:
    candidates: list[Candidate] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)


@dataclass
class Fanout:
    """Peer requests under way (:meth:`Federator.start`), to be collected."""

    req: DiscoverRequest
    plan: Plan
    out: Gathered
    tasks: dict[asyncio.Task[tuple[VerifiedAnswer, float]], Peer]
    started: float  # loop time
