"""Growable rows of unit vectors stored as int8 codes with one float32 scale per row.

A 256-d embedding costs 260 bytes instead of 1 KiB, so a million agents'
description and capability vectors fit in half a gigabyte. Reading a row
gives ``codes * scale``; the rounding error of a cosine is below 1e-2 and is
the same on every read, so scores stay deterministic for identical index
contents. For exhaustive (exact-mode) scans a dequantized float32 copy can be
kept alongside (:meth:`dense`), built from the codes, so the exhaustive and the
candidate paths compute the same numbers.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]
Index = npt.NDArray[np.integer] | int


def quantize(v: Vectors) -> tuple[npt.NDArray[np.int8], Vectors]:
    v = np.asarray(v, dtype=np.float32)
    peak = np.abs(v).max(axis=-1) if v.size else np.zeros(len(v), np.float32)
    scale = (peak / 127.0).astype(np.float32)
    safe = np.where(scale > 0, scale, 1.0)[..., None]
    codes = np.rint(v / safe).clip(-127, 127).astype(np.int8)
    return codes, scale


class QRows:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.codes = np.zeros((0, dim), dtype=np.int8)
        self.scale = np.zeros(0, dtype=np.float32)
        self._dense: Vectors | None = None
        self.keep_dense = False

    def __len__(self) -> int:
        return len(self.scale)

    def reserve(self, rows: int) -> None:
        if rows <= len(self.scale):
            return
        cap = max(64, 2 * len(self.scale), rows)
        codes = np.zeros((cap, self.dim), dtype=np.int8)
        codes[: len(self.codes)] = self.codes
        scale = np.zeros(cap, dtype=np.float32)
        scale[: len(self.scale)] = self.scale
        self.codes, self.scale = codes, scale
        if self._dense is not None:
            dense = np.zeros((cap, self.dim), dtype=np.float32)
            dense[: len(self._dense)] = self._dense
            self._dense = dense

    def set(self, rows: Index | slice, vectors: Vectors) -> None:
        codes, scale = quantize(vectors)
        self.codes[rows] = codes
        self.scale[rows] = scale
        if self._dense is not None:
            self._dense[rows] = codes.astype(np.float32) * scale[..., None]

    def clear(self, rows: Index | slice) -> None:
        self.codes[rows] = 0
        self.scale[rows] = 0.0
        if self._dense is not None:
            self._dense[rows] = 0.0

    def get(self, rows: Index) -> Vectors:
        out: Vectors = self.codes[rows].astype(np.float32)
        out *= self.scale[rows][..., None]
        return out

    def dense(self, n: int) -> Vectors:
        """Dequantized float32 rows [0, n), kept up to date once asked for."""
        if self._dense is None or len(self._dense) < len(self.scale):
            self._dense = self.codes.astype(np.float32) * self.scale[:, None]
        return self._dense[:n]

    def drop_dense(self) -> None:
        self._dense = None

    def state(self, prefix: str, n: int) -> dict[str, npt.NDArray[np.generic]]:
        return {f"{prefix}_codes": self.codes[:n], f"{prefix}_scale": self.scale[:n]}

    @classmethod
    def restore(cls, dim: int, prefix: str, arrays: dict[str, npt.NDArray[np.generic]]) -> QRows:
        q = cls(dim)
        q.codes = np.asarray(arrays[f"{prefix}_codes"], dtype=np.int8).reshape(-1, dim)
        q.scale = np.asarray(arrays[f"{prefix}_scale"], dtype=np.float32)
        if len(q.codes) != len(q.scale):
            raise ValueError(f"{prefix} snapshot is inconsistent")
        return q
