"""A small AGTP-over-HTTP/2 client (httpx) used by the CLI and the tests.

``http://`` URLs use h2c with prior knowledge; ``https://`` negotiates h2
through ALPN. :func:`verify_discover_result` checks an ``ans_signature``
against a JWKS and the ``query_digest`` against the parameters sent.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from ans.governance.keys import TrustedKeys
from ans.governance.signing import RESULT_SIGNATURE_FIELD, verify_document
from ans.protocol.errors import AgtpError
from ans.protocol.messages import AGTP_VERSION, CONTENT_TYPE, query_digest


@dataclass(frozen=True, slots=True)
class AgtpResponse:
    status: int
    headers: Mapping[str, str]
    body: dict[str, Any]

    @property
    def result(self) -> dict[str, Any]:
        return self.body.get("result") or {}

    @property
    def error(self) -> dict[str, Any] | None:
        err = self.body.get("error")
        return err if isinstance(err, dict) else None


class AgtpClient:
    def __init__(
        self,
        base_url: str,
        *,
        agent_id: str,
        principal_id: str,
        scope: str,
        timeout: float = 10.0,
        verify: bool | str = True,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.identity = {
            "agent-id": agent_id,
            "principal-id": principal_id,
            "authority-scope": scope,
        }
        prior_knowledge = self.base_url.startswith("http://")
        tls: bool | ssl.SSLContext = (
            ssl.create_default_context(cafile=verify) if isinstance(verify, str) else verify
        )
        self._http = httpx.Client(
            base_url=self.base_url,
            http1=not prior_knowledge,
            http2=True,
            timeout=timeout,
            verify=tls,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AgtpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(
        self,
        method: str,
        parameters: Mapping[str, Any],
        *,
        task_id: str = "task-cli-1",
        path: str = "/",
    ) -> AgtpResponse:
        body = orjson.dumps({"method": method, "task_id": task_id, "parameters": dict(parameters)})
        headers = {
            "agtp-version": AGTP_VERSION,
            "content-type": CONTENT_TYPE,
            "task-id": task_id,
            **self.identity,
        }
        resp = self._http.request(method, path, content=body, headers=headers)
        try:
            doc = orjson.loads(resp.content)
        except orjson.JSONDecodeError:
            doc = {
                "status": resp.status_code,
                "error": {"code": "not_agtp", "message": resp.text[:200]},
            }
        return AgtpResponse(
            resp.status_code, dict(resp.headers), doc if isinstance(doc, dict) else {}
        )

    def discover(self, parameters: Mapping[str, Any], **kw: Any) -> AgtpResponse:
        return self.call("DISCOVER", parameters, **kw)

    def jwks(self) -> dict[str, Any]:
        resp = self._http.get("/.well-known/jwks.json")
        resp.raise_for_status()
        doc: dict[str, Any] = orjson.loads(resp.content)
        return doc


def verify_discover_result(
    result: Mapping[str, Any], jwks: Mapping[str, Any], parameters: Mapping[str, Any] | None = None
) -> str:
    """Return the signing kid, or raise AgtpError/KeyError_ if anything is off."""
    kid = verify_document(result, TrustedKeys.from_jwks(jwks), RESULT_SIGNATURE_FIELD)
    if parameters is not None and result.get("query_digest") != query_digest(parameters):
        raise AgtpError("query_digest does not match the parameters sent", code="digest_mismatch")
    return str(kid)
