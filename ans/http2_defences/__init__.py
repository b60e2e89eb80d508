"""ANS's defences for its HTTP/2 listener: what hypercorn 0.18 (with h2)
does not bound on its own, added by wrapping hypercorn's connection
handling once per process with :func:`install` (``ans serve`` calls it
before serving). Each was found by a black-box probe of the running server,
has an integration test in ``tests/integration/test_integration_connections.py``
and a test showing that plain hypercorn fails it
(``tests/ans/test_ans_http2_defences.py``); ``docs/http2-defences.md`` says
which could go upstream.

=====================  ==========================================================
:mod:`.late_data`      request data after the answer; requests reset as they arrive
:mod:`.idle`           closed connections, first-request deadline, h2c idle timer
:mod:`.connections`    connections per client address and in all
:mod:`.answers`        answers to a closed connection; the answer write deadline
:mod:`.control_frames` the control-frame budget; too many streams
:mod:`.settings`       :class:`Http2Defences`, ANS's settings, per hypercorn config
:mod:`.hooks`          the supported versions, the methods wrapped, :func:`patch`
=====================  ==========================================================

hypercorn's internals change between minor versions, so :func:`install`
refuses (:class:`UnsupportedHypercorn`) any hypercorn outside the supported
range or without every method it wraps, with the parameters it was written
against.
"""

from __future__ import annotations

from hypercorn.asyncio.tcp_server import TCPServer

from . import answers, connections, control_frames, h11_errors, idle, late_data
from .connections import client_key
from .control_frames import CONTROL_BURST, PREFACE, ControlBudget, FrameCounter
from .hooks import UnsupportedHypercorn, check_version, installed, verify
from .settings import WRITE_TIMEOUT, Http2Defences, attach, defences_of

__all__ = [
    "CONTROL_BURST",
    "PREFACE",
    "WRITE_TIMEOUT",
    "ControlBudget",
    "FrameCounter",
    "Http2Defences",
    "UnsupportedHypercorn",
    "attach",
    "client_key",
    "defences_of",
    "install",
]


def install() -> None:
    """Install the defences (idempotent); :class:`UnsupportedHypercorn` if
    this hypercorn is not one they were written for."""
    check_version()
    if installed(TCPServer, "run"):
        return
    verify()
    late_data.install()
    idle.install()
    answers.install_release_on_close()  # inside the budget: it sees Closed, not RawData
    control_frames.install_stream_cap()
    connections.install()
    control_frames.install_budget()
    answers.install_answer_deadline()
    h11_errors.install_error_bodies()
