"""The positions of the k largest values of a score array, for the candidate
search's top-k of a few thousand to a few hundred thousand scores.

``np.argpartition`` (introselect) costs ~13 ns an element on this machine
kind: 376 us for the ~29,000 BM25 postings a query text touches at 100k
agents, to keep 1,024 of them. :func:`top_k` first finds a threshold from a
strided sample that only ~1.3k of the scores pass, keeps those with one
compare, and partitions only them: 54 us there (60,000 values: 1,087 -> 87
us). Of values tied at the k-th place the earliest positions are kept
(argpartition keeps an arbitrary few). When the sample's threshold lets fewer
than k through (a skewed array), every value is partitioned.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

# Below this many values one partition of them all is as cheap as sampling.
DIRECT_MAX = 4096
# The sample holds about this many of the k best values (so the threshold's
# relative error is ~1/sqrt(SAMPLE_HITS)), and the threshold is set this much
# lower than the sample's k-th best so that k or more pass it.
SAMPLE_HITS = 96
MARGIN = 1.35


def top_k(values: npt.NDArray[np.floating], k: int) -> npt.NDArray[np.intp]:
    """Positions of the k largest ``values``, ascending (all of them when
    there are at most k). Of several values tied at the k-th place, the
    earliest positions are kept."""
    n = len(values)
    if n <= k:
        return np.arange(n)
    if k <= 0:
        return np.zeros(0, dtype=np.intp)
    if n <= DIRECT_MAX or 4 * k >= n:
        return _first_k_best(np.arange(n), values, k)
    # Every stride-th value: about SAMPLE_HITS of the k best fall in the sample.
    stride = max(1, k // SAMPLE_HITS)
    sample = values[::stride]
    m = len(sample)
    rank = min(m, int(MARGIN * k / stride) + 1)  # the rank-th largest of the sample
    threshold = np.partition(sample, m - rank)[m - rank]
    passed = np.flatnonzero(values >= threshold)
    if len(passed) < k:  # the sample was not representative: every value
        passed = np.arange(n)
    return _first_k_best(passed, values[passed], k)


def _first_k_best(
    positions: npt.NDArray[np.intp], values: npt.NDArray[np.floating], k: int
) -> npt.NDArray[np.intp]:
    """The k of ``positions`` (ascending) whose ``values`` are largest, ties
    at the k-th value broken by the earlier position."""
    n = len(values)
    if n <= k:
        return positions
    kth = np.partition(values, n - k)[n - k]
    at_least = values >= kth
    if np.count_nonzero(at_least) == k:  # no tie crosses the k-th place
        kept: npt.NDArray[np.intp] = positions[at_least]
        return kept
    keep = values > kth
    short = k - int(np.count_nonzero(keep))
    keep[np.flatnonzero(values == kth)[:short]] = True  # the earliest of the tied
    out: npt.NDArray[np.intp] = positions[keep]
    return out
