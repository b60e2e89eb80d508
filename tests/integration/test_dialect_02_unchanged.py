"""-02 clients see no change: today's -02 suites, run as they are.

The newer dialect is recognised per request and -02 wins every ambiguity, so
the -02 tests written before it (request parsing, the Authority-Scope
grammar, the HTTP/2 server end to end, signed refusals) must pass unchanged.
This runs those files in a fresh pytest process, so a change to the shared
request path (``AnsApp.answer``, the envelope, DESCRIBE) that breaks a -02
client fails here by name. The native framing's -02 tests are in the same
suite (``test_integration_native.py``) and the -02 rows of
``test_dialect_conformance.py`` check the -02 headers byte by byte.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SUITES_02 = (
    "tests/protocol/test_protocol_messages.py",
    "tests/protocol/test_protocol_scope.py",
    "tests/integration/test_integration_server.py",
    "tests/integration/test_integration_refusals.py",
)


def test_the_02_suites_pass_unchanged() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SUITES_02],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    tail = "\n".join(proc.stdout.splitlines()[-25:])
    assert proc.returncode == 0, tail
    progress = "".join(
        line.split(" [")[0].strip() for line in proc.stdout.splitlines() if "%]" in line
    )
    assert set(progress) == {"."} and len(progress) > 250, tail  # all ran, none skipped
