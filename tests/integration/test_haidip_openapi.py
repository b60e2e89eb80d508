"""The HAIDIP surface answers as its OpenAPI 3.1 document says: schemathesis
(from PyPI) generates requests for every operation of the document served at
``{base}/openapi.json`` except invoke (the gateway's), sends them to a real
``ans serve`` on loopback and checks status codes, content types, headers
and response bodies against the document. A bounded number of examples per
operation keeps it to seconds. Also: the committed document is what
tools/gen_haidip_openapi.py writes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tools.gen_haidip_openapi import OUT, render
from tools.launcher import RunningServer, start_server, stop_server

pytestmark = pytest.mark.integration

ANS = Path(sys.executable).with_name("ans")
CARDS = Path(__file__).resolve().parent.parent / "fixtures" / "cards"
EXAMPLES = 25  # per operation
HEADERS = {
    "agent-id": "agtp://client.example/agents/fuzzer",
    "principal-id": "usr-fuzz",
    "authority-scope": "discovery:query discovery:register",
}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    d = tmp_path_factory.mktemp("haidip-openapi")
    cfg = d / "ans.toml"
    cfg.write_text(
        "[rate_limit]\nenabled = false\n[haidip]\npublic_listing = true\ncard_upload = true\n"
    )
    r = subprocess.run(
        [str(ANS), "import-cards", str(CARDS), "--data-dir", str(d / "data"), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    server = start_server(d / "data", "--config", str(cfg))
    yield server
    stop_server(server)


def test_committed_document_is_generated() -> None:
    assert OUT.read_text(encoding="utf-8") == render()


def test_every_route_but_invoke_answers_as_documented(srv: RunningServer) -> None:
    doc = httpx.get(f"{srv.url}/haidip/v1/openapi.json", timeout=30).json()
    assert doc == json.loads(OUT.read_text(encoding="utf-8"))
    schema = schemathesis.openapi.from_dict(doc)
    tested = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path.endswith("/invoke"):
            continue  # the invocation gateway's route, tested with it

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def run(case: schemathesis.Case) -> None:
            case.call_and_validate(base_url=srv.url, headers=HEADERS, checks=CHECKS)

        run()
        tested.append(f"{operation.method.upper()} {operation.path}")
    assert sorted(tested) == [
        "GET /.well-known/agent-card.json",
        "GET /haidip/v1/agents",
        "GET /haidip/v1/agents/{id}",
        "GET /haidip/v1/openapi.json",
        "POST /haidip/v1/agents",
        "POST /haidip/v1/agents/search",
    ]
    assert not any("Traceback" in line for line in srv.output)
