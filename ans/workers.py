"""``ans serve --workers N``: a supervisor process and N forked workers on the
same listeners, over one store.

The supervisor builds the service once (:func:`ans.wiring.build_service`:
registry, index from its snapshot, audit recovery), binds one listening
socket per worker on each listener with SO_REUSEPORT (the kernel spreads new
connections over them; a socket outlives its worker, so connections queued
to a worker that died wait for its replacement), closes its store and audit
log, freezes the garbage collector's view of the loaded objects and forks the
workers. A worker shares the supervisor's index pages copy-on-write (the
index arrays are read, not written, by a DISCOVER), opens its own store
connections and audit log, follows the store's change feed
(:mod:`ans.follower`) and serves its sockets with hypercorn and the native
listener exactly as one process does (the HTTP/2 defences and the drain are
installed before the fork, so every worker has them). Worker 0 runs the
freshness refresher and writes the index snapshot at shutdown.

The supervisor holds the data directory's lock (the workers inherit it, so a
second ``ans serve`` is refused until the last of them has exited), prints
``ANS listening on URL`` once every worker is ready, restarts a worker that
dies (logged, with a back-off when one keeps dying at start), and on
SIGTERM/SIGINT sends SIGTERM to every worker -- each drains as one process
does -- then completes every worker's audit log from the outbox and exits.
A worker whose supervisor dies gets SIGTERM (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from .config import Config
from .core.context import Clock
from .matcher import profile_from
from .server import listening_socket, native_url, url_of

log = structlog.get_logger("ans.workers")

READY_TIMEOUT = 600.0  # s: a worker catching up a large change feed at start
KILL_AFTER = 15.0  # s past graceful_timeout: a worker still running then is killed
FAST_DEATH = 5.0  # s: a worker that dies sooner than this after its start is restarted later
MAX_BACKOFF = 10.0


def reuseport_listeners(host: str, port: int, n: int) -> list[socket.socket]:
    """``n`` sockets listening on one (host, port) with SO_REUSEPORT; port 0
    picks a free port for the first, the others take the same."""
    first = listening_socket(host, port, reuse_port=True)
    port = first.getsockname()[1]
    socks = [first]
    try:
        socks += [listening_socket(host, port, reuse_port=True) for _ in range(n - 1)]
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def _die_with_parent() -> None:
    """SIGTERM this process when the supervisor dies (Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass
class Slot:
    worker: int
    pid: int = 0
    started: float = 0.0
    deaths: int = 0  # consecutive deaths soon after start
    ready: bool = False


@dataclass
class Supervisor:
    """Forks, watches and stops the workers. ``run_worker(worker, ready)`` runs
    in the child and returns its exit status; ``ready()`` tells the supervisor
    the worker serves."""

    n: int
    run_worker: Callable[[int, Callable[[], None]], int]
    graceful_timeout: float
    # Run once when told to stop (the supervisor closes its listening sockets:
    # once the workers have closed theirs, connections are refused).
    on_stop: Callable[[], None] | None = None
    slots: list[Slot] = field(default_factory=list)
    stopping: bool = False
    signalled: bool = False  # told to stop by SIGTERM/SIGINT (not a failed start)
    stop_deadline: float | None = None

    def __post_init__(self) -> None:
        self.slots = [Slot(w) for w in range(self.n)]
        self._ready_r, self._ready_w = os.pipe()
        os.set_blocking(self._ready_r, False)

    # -- in the supervisor -------------------------------------------------------------
    def start(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        for slot in self.slots:
            self._spawn(slot)

    def stop(self) -> None:
        self._stop()

    def _on_stop(self, signum: int, frame: object) -> None:
        self.signalled = True
        self._stop(signum)

    def _stop(self, signum: int = signal.SIGTERM) -> None:
        if not self.stopping:
            self.stopping = True
            self.stop_deadline = time.monotonic() + self.graceful_timeout + KILL_AFTER
            log.info("stopping the workers", signal=signal.Signals(signum).name)
            if self.on_stop is not None:
                self.on_stop()
        for slot in self.slots:
            if slot.pid:
                try:
                    os.kill(slot.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def _spawn(self, slot: Slot) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        blocked = {signal.SIGTERM, signal.SIGINT}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        pid = os.fork()
        if pid == 0:  # the worker
            status = 1
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                _die_with_parent()
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
                os.close(self._ready_r)
                status = self.run_worker(slot.worker, lambda: self._tell_ready(slot.worker))
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                log.exception("worker failed", worker=slot.worker)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        slot.pid, slot.started, slot.ready = pid, time.monotonic(), False
        log.info("worker started", worker=slot.worker, pid=pid)

    def _tell_ready(self, worker: int) -> None:
        os.write(self._ready_w, f"{worker}\n".encode())

    def _read_ready(self, timeout: float) -> None:
        r, _, _ = select.select([self._ready_r], [], [], timeout)
        if not r:
            return
        try:
            data = os.read(self._ready_r, 4096)
        except BlockingIOError:
            return
        for word in data.split():
            w = int(word)
            if 0 <= w < self.n:
                self.slots[w].ready = True
                self.slots[w].deaths = 0

    def wait_ready(self) -> bool:
        """Until every worker serves (True), or one died first, or the
        supervisor was told to stop (False)."""
        deadline = time.monotonic() + READY_TIMEOUT
        while not all(s.ready for s in self.slots):
            if self.stopping or time.monotonic() > deadline:
                return False
            self._read_ready(0.05)
            pid, status = self._reap()
            if pid:
                worker = self._slot_of(pid)
                log.error("worker died while starting", worker=worker, exit=describe_exit(status))
                return False
        return True

    def _slot_of(self, pid: int) -> int | None:
        for slot in self.slots:
            if slot.pid == pid:
                slot.pid = 0
                return slot.worker
        return None

    def _reap(self) -> tuple[int, int]:
        try:
            return os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return 0, 0

    def watch(self) -> None:
        """Restart workers that die until told to stop; then wait for every
        worker to exit (killing the ones past the drain's time)."""
        while True:
            if self.stopping and not any(s.pid for s in self.slots):
                return
            self._read_ready(0.05)
            if self.stopping and self.stop_deadline and time.monotonic() > self.stop_deadline:
                for s in self.slots:
                    if s.pid:
                        log.error("worker did not stop in time; killed", worker=s.worker)
                        os.kill(s.pid, signal.SIGKILL)
                self.stop_deadline = None
            pid, status = self._reap()
            if not pid:
                continue
            worker = self._slot_of(pid)
            if worker is None:
                continue
            slot = self.slots[worker]
            if self.stopping:
                log.info("worker stopped", worker=worker, exit=describe_exit(status))
                continue
            quick = time.monotonic() - slot.started < FAST_DEATH
            slot.deaths = slot.deaths + 1 if quick else 0
            delay = min(MAX_BACKOFF, 0.5 * 2 ** (slot.deaths - 1)) if slot.deaths else 0.0
            log.error(
                "worker died; restarting it",
                worker=worker,
                pid=pid,
                exit=describe_exit(status),
                restart_in=delay,
            )
            end = time.monotonic() + delay
            while time.monotonic() < end and not self.stopping:
                time.sleep(0.05)
            if not self.stopping:
                self._spawn(slot)


HEADROOM_ID = "ans-workers-headroom"


def share_more(service: Any) -> None:
    """Before the fork, so that the workers share more of the index:

    * grow the index's per-slot arrays once here (a placeholder agent with one
      example, upserted and removed): a worker's first new agent would
      otherwise reallocate them (capacity doubles), a private copy of every
      vector row in each worker; now it fills a free row of the shared arrays;
    * run one query and build the registry's slot link
      (:meth:`ans.core.discovery.Discovery.warm`), so what the first DISCOVER
      builds lazily is built once, in the shared pages."""
    matcher = service.matcher
    profile = profile_from(
        {"canonical_id": HEADROOM_ID, "agent_label": "headroom", "job_description": "headroom"},
        {"tags": ["headroom"], "examples": [{"id": "h", "text": "headroom"}]},
    )
    matcher.upsert(profile, matcher.embed_profile(profile))
    matcher.remove(HEADROOM_ID)
    matcher.query("warm up the index", None)
    service.discovery.warm()


def describe_exit(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"status {os.waitstatus_to_exitcode(status)}"


def serve_workers(built: object, config: Config, n: int) -> int:
    """Serve with ``n`` worker processes (see the module); the exit status."""
    from .native_server import native_ssl_context
    from .server import serve_forever
    from .wiring import Built, rewire_worker

    assert isinstance(built, Built)
    service = built.service
    http = reuseport_listeners(*config.host_port, n)
    native_at = config.native_host_port
    native = reuseport_listeners(*native_at, n) if native_at is not None else None
    applied = service.store.max_seq()
    # Nothing that holds a file or a connection crosses the fork: each worker
    # opens its own (worker 0 its own refresher).
    if built.freshness is not None:
        built.freshness.close()
    service.store.close()
    service.audit.close()
    lock = built.lock
    share_more(service)
    gc.collect()
    gc.freeze()  # the loaded objects stay shared: the collector never writes to them

    def run_worker(worker: int, ready: Callable[[], None]) -> int:
        for i, s in enumerate(http):
            if i != worker:
                s.close()
        for i, s in enumerate(native or ()):
            if i != worker:
                s.close()
        follower = rewire_worker(built, config, worker, applied)
        freshness = None
        if worker == 0:
            from .wiring import build_freshness

            freshness = build_freshness(service, config)
        serve_forever(
            service,
            config,
            on_ready=lambda _url: ready(),
            freshness=freshness,
            gate=built.gate,
            lock=None,  # the supervisor's: released when it and every worker have exited
            listeners=(http[worker], native[worker] if native else None),
            announce=False,
            save_snapshot=worker == 0,
            before_close=follower.stop,
        )
        return 0

    url = url_of(http[0], config.tls_certfile is not None)
    native_shown = None
    if native is not None:
        n_host, n_port = native[0].getsockname()[:2]
        native_shown = native_url(n_host, n_port, native_ssl_context(config))

    def close_sockets() -> None:
        for s in [*http, *(native or ())]:
            s.close()

    sup = Supervisor(n, run_worker, config.graceful_timeout, close_sockets)
    # The supervisor keeps every socket: a replacement worker is forked with
    # it, and connections queued to a worker that died wait for that one.
    ok = False
    try:
        sup.start()
        ok = sup.wait_ready()
        if ok:
            if native_shown is not None:
                # one write (under PYTHONUNBUFFERED print writes the newline apart,
                # and another process's output could land between)
                sys.stdout.write(f"ANS native AGTP listening on {native_shown}\n")
                sys.stdout.flush()
            # one write (under PYTHONUNBUFFERED print writes the newline apart,
            # and another process's output could land between)
            sys.stdout.write(f"ANS listening on {url}\n")
            sys.stdout.flush()
            log.info("workers serving", workers=n, url=url)
        else:
            sup.stop()
        sup.watch()
    finally:
        sup.stop()
        sup.watch()
        _complete_audit(config, service.clock)
        if lock is not None:
            lock.release()
    return 0 if ok or sup.signalled else 1


def _complete_audit(config: Config, clock: Clock) -> None:
    """Once every worker has exited: every worker's log completed from the
    outbox, and the outbox trimmed."""
    from .audited import recover_workers
    from .store_open import default_node, open_store
    from .wiring import worker_audit

    try:
        store = open_store(
            config.store or None,
            data_dir=config.data_dir,
            node=default_node(config.store, config.data_dir),
        )
    except Exception as exc:
        log.error("audit logs not completed at exit", error=str(exc)[:200])
        return
    try:
        open_log = worker_audit(config, clock)
        main = open_log(0)
        try:
            recover_workers(store, config.data_dir, main, open_log)
        finally:
            main.close()
    finally:
        store.close()
