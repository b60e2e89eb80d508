"""Where the HTTP/2 defences attach to hypercorn, and the checks that they
still can: the supported hypercorn versions, every hypercorn method a
defence replaces or calls with the parameters it was written against, and
:func:`patch`, which replaces one method by a wrapper around it.

A wrapper keeps the method it wraps as ``__wrapped__`` (as
:func:`functools.wraps` does), so :func:`plain` finds hypercorn's own
method under any number of wrappers; the tests use it to show that each
defence fails on plain hypercorn.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.protocol.h11 import H11Protocol

SUPPORTED = ((0, 18), (0, 19))  # hypercorn >= 0.18, < 0.19: what the wrappers were written for
MARK = "_ans_http2_defence"  # set on every wrapper this package installs
F = TypeVar("F", bound=Callable[..., Any])


class UnsupportedHypercorn(RuntimeError):
    """hypercorn is not the version (or no longer has the methods) the
    defences were written for; the message is one line for ``ans serve``."""


@dataclass(frozen=True)
class Hook:
    """A hypercorn method a defence replaces (``patched``) or calls."""

    owner: type
    name: str
    parameters: tuple[str, ...]
    patched: bool = True


HOOKS = (
    Hook(H2Protocol, "__init__", ("self", "app", "config", "context", "task_group",
                                  "connection_state", "ssl", "client", "server", "send")),
    Hook(H2Protocol, "handle", ("self", "event")),
    Hook(H2Protocol, "_handle_events", ("self", "events")),
    Hook(H2Protocol, "_create_stream", ("self", "request")),
    Hook(H2Protocol, "stream_send", ("self", "event")),
    Hook(H2Protocol, "_flush", ("self",), patched=False),
    Hook(H2Protocol, "_close_stream", ("self", "stream_id"), patched=False),
    Hook(TCPServer, "__init__", ("self", "app", "loop", "config", "context", "state",
                                 "reader", "writer"), patched=False),  # ans.mtls builds them
    Hook(TCPServer, "run", ("self",)),
    Hook(TCPServer, "_read_data", ("self",)),
    Hook(TCPServer, "_idle_timeout", ("self",)),
    Hook(TCPServer, "_initiate_server_close", ("self",), patched=False),
    Hook(ProtocolWrapper, "handle", ("self", "event")),
    Hook(H11Protocol, "_send_error_response", ("self", "status_code")),
    Hook(H11Protocol, "_send_h11_event", ("self", "event"), patched=False),
)  # fmt: skip


def _version(text: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else (-1, -1)


def check_version(found: str | None = None) -> None:
    """Refuse any hypercorn outside :data:`SUPPORTED`."""
    text = importlib.metadata.version("hypercorn") if found is None else found
    low, high = SUPPORTED
    if not low <= _version(text) < high:
        raise UnsupportedHypercorn(
            f"ANS's HTTP/2 defences were written for hypercorn {low[0]}.{low[1]}.x; "
            f"found {text} (install hypercorn>={low[0]}.{low[1]},<{high[0]}.{high[1]})"
        )


def plain(owner: type, name: str) -> Callable[..., Any]:
    """hypercorn's own ``owner.name``, under every wrapper of ours."""
    fn: Callable[..., Any] = getattr(owner, name)
    while getattr(fn, MARK, False):
        fn = fn.__wrapped__  # type: ignore[attr-defined]
    return fn


def verify(hooks: tuple[Hook, ...] = HOOKS) -> None:
    """Refuse unless every hook exists with the parameters it was written for."""
    for hook in hooks:
        where = f"{hook.owner.__module__}.{hook.owner.__qualname__}.{hook.name}"
        fn = plain(hook.owner, hook.name) if hasattr(hook.owner, hook.name) else None
        if not callable(fn):
            raise UnsupportedHypercorn(f"ANS's HTTP/2 defences: hypercorn has no {where}")
        found = tuple(inspect.signature(fn).parameters)
        if found != hook.parameters:
            raise UnsupportedHypercorn(
                f"ANS's HTTP/2 defences: {where} takes {found}, written for {hook.parameters}"
            )


def patch(owner: type, name: str, make: Callable[[Callable[..., Any]], F]) -> None:
    """Replace ``owner.name`` by ``make(current)``, a wrapper that calls it."""
    current: Callable[..., Any] = getattr(owner, name)
    wrapper = make(current)
    setattr(wrapper, MARK, True)
    wrapper.__wrapped__ = current  # type: ignore[attr-defined]
    setattr(owner, name, wrapper)


def installed(owner: type, name: str) -> bool:
    return bool(getattr(getattr(owner, name), MARK, False))
