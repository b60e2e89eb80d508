"""The ASGI types every surface and the app share (one definition)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
# Reads a request's body, bounded by its headers (AnsApp._read_body).
ReadBody = Callable[[Receive, dict[str, str]], Awaitable[bytes]]
