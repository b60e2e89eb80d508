"""The order of ``GET {base}/agents``: every indexed agent in canonical-id
order, kept between requests while the index does not change, so a page
costs one pass over the gate mask instead of a sort of every id.

The order is rebuilt when the change-feed position the listing reads (every
registration, lifecycle event or removal moves it), the registry object or
its size differ from the ones it was built for. A page is then the agents
the gate mask lets through, after the cursor's id, skipping ``skip``.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..registry import Registry


@dataclass(frozen=True, slots=True)
class Page:
    ids: list[str]  # the page, in canonical-id order
    count: int  # every agent the mask lets through
    more: bool  # agents follow the page


class ListingOrder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[int, int, int] | None = None
        self._slots: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._ids: list[str] = []

    def page(
        self,
        registry: Registry,
        mask: npt.NDArray[np.bool_],
        position: int,
        after: str | None,
        skip: int,
        top: int,
    ) -> Page:
        """One page (caller holds the index lock, ``mask`` is the registry's
        gate mask for the caller and the filters)."""
        key = (id(registry), position, len(registry))
        with self._lock:
            if key != self._key:
                self._slots, self._ids = registry.ordered()
                self._key = key
            slots, ids = self._slots, self._ids
        keep = mask[slots] if len(slots) else np.zeros(0, dtype=bool)
        count = int(np.count_nonzero(keep))
        start = 0
        if after is not None:
            start = int(np.count_nonzero(keep[: bisect.bisect_right(ids, after)]))
        first = start + skip
        chosen = slots[keep][first : first + top]
        return Page(registry.ids_at(chosen.tolist()), count, first + top < count)
