"""Index snapshots: the whole capability index written to a directory and read
back, so a restart does not re-embed the catalog.

Owns the on-disk format (``index.json`` with ids, keys and meta;
``arrays.npz`` with the slot table's arrays; the FAISS files in approximate
mode), the atomic replace (a sibling temporary directory renamed into place),
and the checks that refuse a snapshot of another format or embedder.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from ..examples_index import ExampleBlocks
from ..lexical import LexicalIndex
from ..postings import SlotPostings
from .approximate import AnnMode
from .embedder import Embedder, embedder_fingerprint
from .int8_rows import QRows
from .profiles import FACETS
from .slots import SlotTable

# 2: the FAISS lists may leave out agents that wait (``ann_pending``, AnnMode);
# code that reads only format 1 would lose those, so it refuses format 2 and
# rebuilds. Format 1 is read as "none waiting".
SNAPSHOT_FORMAT = 2
READABLE_FORMATS = (1, 2)
# A numpy value of the caller's meta is saved as this array (not in the JSON).
META_ARRAY = "meta_"
# Read back into the meta: the canonical id of every slot as saved, in slot order.
SLOT_IDS = "slot_ids"
# What a damaged or foreign snapshot raises while it is read: treated as "no snapshot".
LOAD_ERRORS = (OSError, ValueError, KeyError, TypeError, orjson.JSONDecodeError, RuntimeError)


@dataclass(frozen=True, slots=True)
class Snapshot:
    table: SlotTable
    approximate: bool  # the FAISS files are in the directory
    ann_built_for: int
    ann_pending: list[int]  # live slots not in the FAISS lists (AnnMode.pending)
    meta: dict[str, Any]


def write(
    directory: Path, table: SlotTable, ann: AnnMode, embedder: Embedder, meta: Mapping[str, Any]
) -> None:
    """Write the index to ``directory`` atomically, with the caller's ``meta``
    (the caller holds the index lock)."""
    table.tags.compact()
    table.lexical.postings.compact()
    n = len(table.id_of)
    arrays: dict[str, npt.NDArray[np.generic]] = {
        **table.ctx.state("ctx", n),
        **table.cap.state("cap", n),
        "has_examples": table.has_examples[:n],
        "n_tags": table.n_tags[:n],
        "digest": table.digest[:n],
        **{f"tag_{k}": v for k, v in table.tags.state().items()},
        **{f"lex_{k}": v for k, v in table.lexical.state().items()},
        **table.examples.state(),
    }
    # the caller's arrays (numpy values of ``meta``) go with the index's arrays
    extra = [k for k, v in meta.items() if isinstance(v, np.ndarray)]
    arrays.update({META_ARRAY + k: meta[k] for k in extra})
    doc = {
        "format": SNAPSHOT_FORMAT,
        "dim": table.dim,
        "example_dims": table.examples.dims,
        "embedder": embedder_fingerprint(embedder),
        "ids": table.id_of,
        "tag_keys": table.tags.keys,
        "lex_keys": table.lexical.postings.keys,
        "approximate": ann.active,
        "ann_built_for": ann.built_for,
        "ann_pending": list(ann.pending),
        "meta": {k: v for k, v in meta.items() if k not in extra},
        "meta_arrays": extra,
    }
    directory = Path(directory)
    tmp = directory.with_name(f"{directory.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.mkdir(parents=True)
    try:
        with open(tmp / "arrays.npz", "wb") as fh:
            np.savez(fh, **arrays)  # type: ignore[arg-type]
        ann.save(tmp)
        (tmp / "index.json").write_bytes(orjson.dumps(doc))
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        old = directory.with_name(f"{directory.name}.old-{uuid.uuid4().hex[:8]}")
        if directory.exists():
            directory.rename(old)
        tmp.rename(directory)
        if old.exists():
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# The row arrays a snapshot restores with room to grow: the int8 rows of
# context, capability and examples, and their scales.
ROOMY = frozenset(f"{p}_{k}" for p in ("ctx", "cap", "ex") for k in ("codes", "scale"))
READ_CHUNK = 16 << 20


def _with_room(npz: Any, key: str) -> tuple[npt.NDArray[Any], int]:
    """The array ``key`` of the snapshot in an array with room for as many rows
    again (zeros), and how many rows it holds.

    The first agent a process adds beyond the restored rows would otherwise
    copy every row into an array twice the size (QRows.reserve): at 1M agents
    ~0.9 GB written by every worker of ``ans serve --workers`` on its first
    ACTIVATE (its private copy, where the restored rows were shared with the
    supervisor). Read here, before the fork, the rows are written once and
    shared; the room stays zero pages the kernel has not allocated until a row
    is written. Read in chunks straight into the array: no second copy of the
    rows is ever held."""
    with npz.zip.open(f"{key}.npy") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        if fortran or dtype.hasobject or not shape:
            array = npz[key]
            return array, len(array)
        n = shape[0]
        out = np.zeros((max(64, 2 * n), *shape[1:]), dtype=dtype)
        view = memoryview(out[:n].reshape(-1).view(np.uint8).data)
        done = 0
        while done < len(view):
            got = f.readinto(view[done : done + READ_CHUNK])
            if not got:
                raise ValueError(f"snapshot array {key} is truncated")
            done += got
        return out, n


def read(directory: Path, embedder: Embedder) -> Snapshot | None:
    """The slot table saved in ``directory``, or None when the snapshot is of
    another format or embedder, or inconsistent. A damaged one raises one of
    :data:`LOAD_ERRORS`. The FAISS files, if any, are the caller's to load."""
    doc = orjson.loads((directory / "index.json").read_bytes())
    if (
        doc.get("format") not in READABLE_FORMATS
        or doc.get("dim") != embedder.dim
        or doc.get("embedder") != embedder_fingerprint(embedder)
    ):
        return None
    # np.load gives each array its own (writable) memory: restored as is,
    # never copied again (a 1M-agent index is 1.6 GB of arrays). The rows
    # are read into arrays with room for as many rows again (see _with_room).
    rows: dict[str, int] = {}
    with np.load(directory / "arrays.npz", allow_pickle=False) as npz:
        arrays = {}
        for k in npz.files:
            if k in ROOMY:
                arrays[k], rows[k] = _with_room(npz, k)
            else:
                arrays[k] = npz[k]
    meta: dict[str, Any] = doc.get("meta") or {}
    for k in doc.get("meta_arrays") or ():
        meta[k] = arrays.pop(META_ARRAY + k)
    dim = embedder.dim
    table = SlotTable(dim, doc["example_dims"], keep_profiles=False)
    # interned, as the registry interns its ids: one string object per agent
    ids: list[str | None] = [
        sys.intern(c) if isinstance(c, str) and len(c) <= 64 else c for c in doc["ids"]
    ]
    n = len(ids)
    table.ctx = QRows.restore(dim, "ctx", arrays, pack=True)
    table.cap = QRows.restore(dim, "cap", arrays, pack=True)
    table.has_examples = np.asarray(arrays["has_examples"], dtype=bool)
    table.n_tags = np.asarray(arrays["n_tags"], dtype=np.int16)
    # absent from snapshots written before the facet-sums file: unknown (0), so
    # restricted queries re-embed those agents (and fill the file) once
    saved = arrays.get("digest")
    table.digest = (
        np.asarray(saved, dtype=np.int64) if saved is not None else np.zeros(n, dtype=np.int64)
    )
    table.tags = SlotPostings.restore(
        0, doc["tag_keys"], {k[4:]: v for k, v in arrays.items() if k.startswith("tag_")}
    )
    table.lexical = LexicalIndex.restore(
        len(FACETS),
        doc["lex_keys"],
        {k[4:]: v for k, v in arrays.items() if k.startswith("lex_")},
    )
    table.examples = ExampleBlocks.restore(doc["example_dims"], arrays, rows.get("ex_scale"))
    if not (
        rows.get("ctx_scale") == rows.get("cap_scale") == len(table.has_examples)
        == len(table.digest) == n
    ):
        return None
    table.id_of = ids
    table.slot_of = {c: s for s, c in enumerate(ids) if c is not None}
    table.alive = np.array([c is not None for c in ids], dtype=bool)
    table.free = [s for s, c in enumerate(ids) if c is None]
    # the id of each slot as saved (the table's own list changes with the first
    # write): what the caller's per-slot meta arrays are aligned with
    meta[SLOT_IDS] = list(ids)
    return Snapshot(
        table,
        bool(doc.get("approximate")),
        int(doc.get("ann_built_for") or len(table.slot_of)),
        _live(doc.get("ann_pending") or (), ids),
        meta,
    )


def _live(slots: Sequence[Any], ids: Sequence[str | None]) -> list[int]:
    """The saved slots that hold an agent (the others are dropped)."""
    out = [int(s) for s in slots]
    return [s for s in out if 0 <= s < len(ids) and ids[s] is not None]
