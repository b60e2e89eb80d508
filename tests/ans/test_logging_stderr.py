"""The operational log handler writes to ``sys.stderr`` as it is when a line
is written: a stream replaced and closed since logging was configured (a
test harness's capture) must not make later lines fail."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator

import pytest
import structlog

from ans.server import CurrentStderr, configure_logging


@pytest.fixture
def restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    config = structlog.get_config()
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.configure(**config)


def test_lines_follow_stderr_after_it_is_replaced_and_the_old_one_closed(
    restored: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure_logging("info", "json")
    assert any(isinstance(h, CurrentStderr) for h in logging.getLogger().handlers)
    logging.getLogger("hypercorn.error").warning("one")
    assert "one" in first.getvalue()
    first.close()  # the stream the handler was configured with is gone
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    errors: list[str] = []
    monkeypatch.setattr(logging.Handler, "handleError", lambda self, r: errors.append("x"))
    logging.getLogger("hypercorn.error").warning("two")
    assert errors == []
    assert "two" in second.getvalue() and '"level": "warning"' in second.getvalue()
