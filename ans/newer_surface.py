"""The newer AGTP dialect (-09, discovery-01) as a surface of the one core.

:class:`NewerSurface` is what :meth:`ans.app.AnsApp.answer` calls for a request
:func:`~ans.protocol.dialect.recognise` names newer, over either framing. It
parses with :mod:`ans.protocol.newer` into the same typed requests, passes
the same gate (``authenticate_and_limit``: 401, 429 per Agent-ID), the same
scope/zone checks and audit records, and the same core (discovery, name
resolution, DESCRIBE); then it writes the answer the newer way:

* status codes: 451 -> 455, 452 -> 456, 453 -> 457; 262 Authorization
  Required for an anonymous DISCOVER with criteria and an anonymous DESCRIBE
  of an indexed agent;
* error bodies ``{"status", "task_id", "error": {"code" (kebab-case),
  "message", "detail", ...}}`` (``detail`` as the reference server names it);
  every DISCOVER error object is signed (``ans_signature``), as in -02;
* headers: ``Server-ID`` (this ANS's canonical id), ``Owner-ID``,
  ``Agent-ID`` / ``Task-ID`` / ``Request-ID`` echoed, ``Response-ID``,
  ``Attribution-Record`` + ``Audit-ID`` (:mod:`ans.attribution`) and
  ``Content-Type: application/vnd.agtp+json``; no ``AGTP-Version`` /
  ``AGTP-Status`` / ``Server-Agent-ID`` (retired);
* DESCRIBE answers Agent Identity Documents; with ``Accept:
  application/vnd.agtp.identity+json`` the document itself is the body.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from ans.governance.audit import rfc3339
from ans.protocol import newer
from ans.protocol.dialect import (
    IDENTITY_CONTENT_TYPE,
    NEWER_CONTENT_TYPE,
    Dialect,
    code_for,
    status_for,
)
from ans.protocol.errors import (
    AgtpError,
    AuthorizationRequired,
    ErrorCode,
    UnsupportedMethod,
)
from ans.protocol.messages import answering, is_task_id

from .attribution import AttributionChain, request_hash
from .gate import Credentials, RequestGate
from .refusals import SIGNED_METHODS, refusal_object, sign_refusal
from .request_log import note
from .service import AnsService

NEWER_METHODS = ("DISCOVER", "DESCRIBE")
_ECHO_RE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,510}[\x21-\x7e])?")

Payload = tuple[int, bytes, str, str | None]  # status, body, content type, task id


class NewerSurface:
    def __init__(self, service: AnsService, gate: RequestGate) -> None:
        self.service = service
        self.gate = gate
        self.server_id = str(service.manifest["canonical_id"])
        self.owner_id = service.config.principal_org
        self.chain = AttributionChain(service.key, self.server_id, service.clock)

    # -- requests ------------------------------------------------------------------------
    async def agtp(
        self,
        method: str,
        headers: Mapping[str, str],
        body: bytes,
        creds: Credentials,
        target: str | None,
    ) -> Payload:
        """parse (400/422/404) -> authenticate and rate limit (401/429) -> the
        method with its scope/zone checks (455/457); raises AgtpError."""
        note(dialect=Dialect.NEWER.value)
        if method == "DISCOVER":
            return await self._discover(headers, body, creds, target)
        if method == "DESCRIBE":
            return self._describe(headers, body, creds, target)
        raise UnsupportedMethod(
            f"method {method[:32]!r} is not served in the newer dialect; supported: "
            f"{', '.join(NEWER_METHODS)} (ACTIVATE and LIFECYCLE: the -02 governance hook)"
        )

    async def _discover(
        self, headers: Mapping[str, str], body: bytes, creds: Credentials, target: str | None
    ) -> Payload:
        svc = self.service
        nd = newer.parse_discover(headers, body, svc.limits, target)
        if nd.request is None:
            with answering(nd.task_id):
                if nd.has_query:
                    self._audit_262("DISCOVER", nd.task_id, creds)
                    raise AuthorizationRequired(
                        "anonymous discovery: a DISCOVER with criteria requires Agent-ID and "
                        "Owner-ID (and discovery:query); without criteria it returns this "
                        "server's Identity Document"
                    )
            return self._document(headers, nd.task_id, svc.describer.identity_document)
        req = nd.request
        with answering(req.task_id, req.query_digest):
            req = self.gate.authenticate_and_limit("DISCOVER", req, creds)
            note(agent_id=req.identity.agent_id, task_id=req.task_id)
            if nd.name is not None:
                result = svc.resolve_name(req, nd.name)
            else:
                result = await svc.discover_async(req)
            note(results=result.get("returned"), intent=req.params.intent)
        return self._envelope(req.task_id, result)

    def _describe(
        self, headers: Mapping[str, str], body: bytes, creds: Credentials, target: str | None
    ) -> Payload:
        svc = self.service
        nd = newer.parse_describe(headers, body, svc.limits, target)
        req, ref = nd.request, nd.target
        own = svc.describer.identity_document
        with answering(req.task_id):
            if ref is None or ref.canonical_id == self.server_id:
                return self._document(headers, req.task_id, own)
            if req.identity is None:
                self._audit_262("DESCRIBE", req.task_id, creds)
                raise AuthorizationRequired(
                    "DESCRIBE of an indexed agent requires Agent-ID, Owner-ID and "
                    "Authority-Scope with discovery:query (this server's own document needs none)"
                )
            req = self.gate.authenticate_and_limit("DESCRIBE", req, creds)
            note(agent_id=getattr(req.identity, "agent_id", None), task_id=req.task_id)
            doc = svc.describer.identity_of(svc.describe(req))
        return self._document(headers, req.task_id, doc)

    def _audit_262(self, method: str, task_id: str | None, creds: Credentials) -> None:
        """An anonymous request refused 262 is security-relevant: audited like a 401."""
        self.service.audit.record(
            "authentication_failed",
            status=262,
            code=str(ErrorCode.AUTHORIZATION_REQUIRED),
            method=method,
            task_id=task_id,
            client_address=creds.client_address,
            dialect="agtp-09",
        )

    def _envelope(self, task_id: str | None, result: Any) -> Payload:
        body = orjson.dumps({"status": 200, "task_id": task_id, "result": result})
        return 200, body, NEWER_CONTENT_TYPE, task_id

    def _document(self, headers: Mapping[str, str], task_id: str | None, doc: Any) -> Payload:
        if IDENTITY_CONTENT_TYPE in headers.get("accept", "").lower():
            return 200, orjson.dumps(doc), IDENTITY_CONTENT_TYPE, task_id
        return self._envelope(task_id, doc)

    # -- answers -------------------------------------------------------------------------
    def error(self, err: AgtpError, task_id: str | None, method: Any) -> tuple[int, bytes]:
        """The newer error answer of ``err`` (already typed): status and body;
        a DISCOVER error object is signed with the ANS key."""
        status = status_for(Dialect.NEWER, err.status)
        code = code_for(Dialect.NEWER, str(err.code))
        if method in SIGNED_METHODS:
            error = refusal_object(err, task_id, rfc3339(self.service.clock()))
            error.update({"code": code, "status": status, "detail": err.message})
            error = sign_refusal(error, self.service.key)
        else:
            error = {"code": code, "message": err.message, "detail": err.message}
        return status, orjson.dumps({"status": status, "task_id": task_id, "error": error})

    def headers(
        self,
        status: int,
        task_id: str | None,
        body: bytes,
        content_type: str,
        request: tuple[str, str | None, Mapping[str, str], bytes],
        extra: tuple[tuple[str, str], ...] = (),
    ) -> tuple[tuple[str, str], ...]:
        """The newer response headers, the Attribution-Record included.
        ``request`` is (method, target, headers, body) as received."""
        method, target, req_headers, req_body = request
        out: list[tuple[str, str]] = [("Server-ID", self.server_id), ("Owner-ID", self.owner_id)]
        echoed: dict[str, str | None] = {}
        for name, header in (("Agent-ID", "agent-id"), ("Request-ID", "request-id")):
            value = req_headers.get(header)
            value = value.strip() if value is not None else None
            ok = value is not None and _ECHO_RE.fullmatch(value) is not None
            echoed[header] = value if ok else None
            if ok and value is not None:
                out.append((name, value))
        if task_id is not None and is_task_id(task_id):
            out.append(("Task-ID", task_id))
        response_id = self.chain.new_response_id()
        session = req_headers.get("session-id")
        fields = {
            "method": method,
            "request_hash": request_hash(method, target, req_body),
            "response_status": status,
            "agent_id": echoed["agent-id"],
            "owner_id": _clean(req_headers.get("owner-id")),
            "task_id": task_id if task_id is not None and is_task_id(task_id) else None,
            "session_id": _clean(session),
            "request_id": echoed["request-id"],
            "response_id": response_id,
        }
        jws, audit_id = self.chain.record(fields, body)
        out += [
            ("Response-ID", response_id),
            ("Audit-ID", audit_id),
            ("Attribution-Record", jws),
        ]
        if body:
            out.append(("Content-Type", content_type))
        out += [(n, v) for n, v in extra if n.lower() != "content-type"]
        return tuple(out)


def _clean(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return value if _ECHO_RE.fullmatch(value) is not None else None
