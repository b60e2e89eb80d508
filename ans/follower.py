"""A worker's view of the registry kept equal to the store's: the change-feed
follower of ``ans serve --workers N``.

Every worker process holds its own live index (forked from the supervisor's,
loaded once). Writes go to the store first; the store's ``change_seq`` (one
indexed read: :meth:`RegistryStore.max_seq`) says whether another worker has
committed something this one has not applied yet. :class:`Follower`

* catches up before every DISCOVER and DESCRIBE (:meth:`catch_up`, called by
  :class:`~ans.service.AnsService`): an ACTIVATE or LIFECYCLE acknowledged by
  any worker is honoured by this worker's next answer;
* catches up on a short poll in a background thread, so an idle worker stays
  warm (a new agent is visible everywhere within the poll interval);
* is the index's ``write_lock`` (:meth:`section`): a state change runs under
  this process's thread lock and the data directory's writers' lock
  (:class:`~ans.datadir_lock.WritersLock`), after catching up, so its
  admissibility checks see every other worker's writes; afterwards everything
  up to the store's seq is applied (the writer updated its own index).

Applying rows: withdrawn agents (Suspended, Revoked, Deprecated, Removed, or
signed by a key no longer trusted) leave the index first, under its lock;
new and changed Active agents are then embedded in batches (outside the
index lock) and upserted. An agent's vectors are not in the store, so a
follower embeds a changed agent itself (one embedder call per batch); what
the snapshot already holds is never re-embedded.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from types import TracebackType

import structlog

from ans.governance.lifecycle import ACTIVE, SUSPENDED

from .core.context import CoreContext
from .core.live_index import LiveIndex
from .core.loader import INDEX_BATCH, batches
from .datadir_lock import WritersLock
from .matcher import profile_from
from .metrics import FEED_LAG
from .profile_metadata import is_self_asserted
from .registry import AgentEntry
from .store import StoredAgent

log = structlog.get_logger("ans.follower")

POLL = 0.02  # s: how often an idle worker looks at the feed
WITHDRAWN = frozenset({SUSPENDED, "Revoked", "Deprecated"})  # never served, not even from a peer


class Follower:
    def __init__(
        self,
        ctx: CoreContext,
        index: LiveIndex,
        writers: WritersLock,
        applied: int,
        poll: float = POLL,
        worker: int = 0,
    ) -> None:
        self.ctx = ctx
        self.worker = worker  # which worker this is (the health endpoint says)
        self.index = index
        self.writers = writers
        self.applied = applied  # every change up to this change_seq is in the index
        self.poll = poll
        self.applied_rows = 0  # rows applied since start (stats, tests)
        self._apply = threading.Lock()  # one catch-up at a time, never during a write
        self._thread_lock = threading.Lock()  # this process's writers, one at a time
        # True while this process holds the writers' lock, caught up: no other
        # worker can commit then, and our own writes update our index.
        self._writing = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- reading ---------------------------------------------------------------------
    def catch_up(self) -> None:
        """Apply every change committed after ours (one indexed read when there
        is none)."""
        if self._writing:  # we hold the writers' lock and have seen every other write
            return
        with self._apply:
            if not self._writing:
                self._catch_up_locked()

    def _catch_up_locked(self) -> None:
        store = self.ctx.store
        seq = store.max_seq()
        FEED_LAG.set(max(0, seq - self.applied))
        if seq <= self.applied:
            return
        rows = list(store.changed_since(self.applied))
        self._apply_rows(rows)
        if len(rows) < seq - self.applied:
            # Some seqs changed no agent row we can see now (an id revoked before
            # it was ever registered here, or one row changed twice): the
            # withdrawn set is read whole, as at start-up.
            withdrawn = store.withdrawn()
            with self.index.lock:
                self.index.withdrawn = withdrawn
        self.applied = seq
        self.applied_rows += len(rows)

    def _apply_rows(self, rows: Sequence[StoredAgent]) -> None:
        index, keys = self.index, self.ctx.governance_keys
        live: list[StoredAgent] = []
        with index.lock:  # withdrawals first, at once
            for a in rows:
                cid = a.canonical_id
                # A self-asserted record is signed by no key (as the loader reads it).
                trusted = keys.get(a.signer_kid) is not None or is_self_asserted(a.signer_kid)
                if a.lifecycle_state == ACTIVE and trusted:
                    live.append(a)
                    index.withdrawn.pop(cid, None)
                    continue
                index.remove(cid)
                if a.lifecycle_state in WITHDRAWN:
                    index.withdrawn[cid] = a.lifecycle_state
                else:
                    index.withdrawn.pop(cid, None)
        matcher = self.ctx.matcher
        for chunk in batches(live, INDEX_BATCH):
            profiles = [profile_from(a.manifest, a.capabilities) for a in chunk]
            vectors = matcher.embed_profiles(profiles)
            entries = [AgentEntry.from_stored(a) for a in chunk]
            with index.lock:
                # a small chunk goes to the postings' delta (SlotTable.place_many)
                matcher.upsert_many(list(zip(profiles, vectors, strict=True)))
                index.registry.put_many(entries)
                for a in chunk:
                    index.forget_fields(a.canonical_id)

    # -- writing ---------------------------------------------------------------------
    def __enter__(self) -> Follower:
        """The write section (the index's ``write_lock``)."""
        self._thread_lock.acquire()
        try:
            self.writers.acquire()
            try:
                with self._apply:
                    self._catch_up_locked()
                    self._writing = True
            except BaseException:
                self.writers.release()
                raise
        except BaseException:
            self._thread_lock.release()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            with self._apply:
                self._writing = False
                if kind is None:
                    # Our own commits are in our index already: mark them applied,
                    # but only when nothing else committed between our catch-up
                    # and our write (another node shares no lock with us; jumping
                    # to max_seq() would step over its commits for good). Else,
                    # and after a failure, the feed applies them again.
                    written = self.ctx.store.written_seqs()
                    if written is not None and written[0] == self.applied + 1:
                        self.applied = written[1]
        finally:
            self.writers.release()
            self._thread_lock.release()

    # -- the background poll ---------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ans-follower", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            try:
                self.catch_up()
            except Exception:  # the next DISCOVER tries again (and answers the error)
                log.exception("change feed not applied")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
