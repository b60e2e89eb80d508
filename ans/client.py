"""Small synchronous AGTP clients used by the CLI and the tests.

:class:`AgtpClient` speaks the HTTP/2 binding (httpx): ``http://`` URLs use
h2c with prior knowledge; ``https://`` negotiates h2 through ALPN.
:class:`NativeAgtpClient` speaks the native AGTP/1.0 framing to a server's
``--native-listen`` (``agtp://`` TLS 1.3, ``agtp+cleartext://`` TCP);
:func:`connect` picks one by URL. :func:`verify_discover_result` checks an
``ans_signature`` against a JWKS and the ``query_digest`` against the
parameters sent; :func:`verify_discover_answer` checks any DISCOVER answer,
a signed refusal included, and rejects an unsigned one
(:meth:`_Client.discover_verified` asks and checks in one call).

Both clients speak either dialect (``dialect``): ``agtp-02`` (the default:
``AGTP-Version``, ``Principal-ID``, space-separated scopes,
``application/agtp+json``) or ``agtp-09``, the newer drafts' wire
(``Owner-ID``, comma-separated scopes, ``application/vnd.agtp+json``, no
``AGTP-Version``, a path on the native request line). Answers of either
dialect are read the same way (:class:`AgtpResponse`); the newer error body
(kebab-case ``code``, ``detail``) and its ``Attribution-Record``
(:func:`verify_attribution`) are understood.
"""

from __future__ import annotations

import hashlib
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

import httpx
import orjson

from ans.federation.native_transport import native_origin
from ans.federation.peer_keys import manifest_jwks
from ans.federation.peers import is_native
from ans.federation.transport import PeerError
from ans.governance.keys import TrustedKeys
from ans.governance.signing import RESULT_SIGNATURE_FIELD, verify_document
from ans.protocol.dialect import NEWER_CONTENT_TYPE, Dialect
from ans.protocol.envelope import _header_text
from ans.protocol.errors import (
    AgtpError,
    ErrorCode,
    InvalidHeader,
    SignatureInvalid,
    UnsignedResponse,
)
from ans.protocol.messages import AGTP_VERSION, CONTENT_TYPE, query_digest
from ans.protocol.native import NativeResponse, NativeResponseParser, encode_request
from ans.protocol.request_types import MAX_ID_LEN

from .attribution import verify_record
from .refusals import check_refusal

# The largest answer a native client reads (a DISCOVER answer is bounded by
# the server's limit; this bounds a misbehaving server).
MAX_NATIVE_ANSWER = 16 * 1024 * 1024


class UnsendableParameters(ValueError):
    """The request's parameters cannot be written as JSON (an integer beyond
    64 bits, a string with a lone surrogate): nothing was sent."""


@dataclass(frozen=True, slots=True)
class AgtpResponse:
    status: int
    headers: Mapping[str, str]
    body: dict[str, Any]
    raw: bytes = b""  # the body bytes as received

    @property
    def result(self) -> dict[str, Any]:
        return self.body.get("result") or {}

    @property
    def error(self) -> dict[str, Any] | None:
        err = self.body.get("error")
        return err if isinstance(err, dict) else None


class _Client:
    """What both clients share: the caller's identity, the request envelope,
    ``with`` support. Subclasses send (:meth:`call`) and fetch keys (:meth:`jwks`)."""

    def __init__(
        self,
        base_url: str,
        agent_id: str,
        principal_id: str,
        scope: str,
        dialect: Dialect | str = Dialect.AGTP_02,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.dialect = Dialect(dialect)
        if self.dialect is Dialect.NEWER:
            self.identity = {
                "agent-id": agent_id,
                "owner-id": principal_id,
                "authority-scope": ", ".join(scope.replace(",", " ").split()),
            }
        else:
            self.identity = {
                "agent-id": agent_id,
                "principal-id": principal_id,
                "authority-scope": scope,
            }
        try:  # the server's own rule; h2 would not even send a newline
            for name in self.identity:
                _header_text(self.identity, name)
        except InvalidHeader:
            value = self.identity[name]
            raise UnsendableParameters(
                f"{name} must be at most {MAX_ID_LEN} printable ASCII characters, "
                f"got {value[:60]!r}"
            ) from None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError

    def call(
        self,
        method: str,
        parameters: Mapping[str, Any],
        *,
        task_id: str = "task-cli-1",
        path: str = "/",
    ) -> AgtpResponse:
        raise NotImplementedError

    def jwks(self) -> dict[str, Any]:
        raise NotImplementedError

    def discover(self, parameters: Mapping[str, Any], **kw: Any) -> AgtpResponse:
        return self.call("DISCOVER", parameters, **kw)

    def discover_verified(
        self,
        parameters: Mapping[str, Any],
        *,
        jwks: Mapping[str, Any] | None = None,
        task_id: str = "task-cli-1",
        path: str = "/",
    ) -> tuple[AgtpResponse, str]:
        """DISCOVER, then verify the answer whatever its status against
        ``jwks`` (default: the server's own, :meth:`jwks`); return it with
        the signing kid. Raises :class:`UnsignedResponse` for an unsigned
        answer, :class:`~ans.protocol.errors.SignatureInvalid` (or
        ``KeyFileError`` for an unusable JWKS) when it does not verify."""
        resp = self.call("DISCOVER", parameters, task_id=task_id, path=path)
        keys = jwks if jwks is not None else self.jwks()
        return resp, verify_discover_answer(resp, keys, parameters, task_id)

    def _envelope(
        self, method: str, parameters: Mapping[str, Any], task_id: str
    ) -> tuple[dict[str, str], bytes]:
        try:
            body = orjson.dumps(
                {"method": method, "task_id": task_id, "parameters": dict(parameters)}
            )
        except orjson.JSONEncodeError as exc:  # an integer beyond 64 bits, a lone surrogate
            msg = f"{method} parameters cannot be sent as JSON: {exc}"
            raise UnsendableParameters(msg) from None
        if self.dialect is Dialect.NEWER:
            headers = {"content-type": NEWER_CONTENT_TYPE, "task-id": task_id, **self.identity}
        else:
            headers = {
                "agtp-version": AGTP_VERSION,
                "content-type": CONTENT_TYPE,
                "task-id": task_id,
                **self.identity,
            }
        return headers, body


class AgtpClient(_Client):
    def __init__(
        self,
        base_url: str,
        *,
        agent_id: str,
        principal_id: str,
        scope: str,
        timeout: float = 10.0,
        verify: bool | str = True,
        dialect: Dialect | str = Dialect.AGTP_02,
    ) -> None:
        super().__init__(base_url, agent_id, principal_id, scope, dialect)
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

    def call(
        self,
        method: str,
        parameters: Mapping[str, Any],
        *,
        task_id: str = "task-cli-1",
        path: str = "/",
    ) -> AgtpResponse:
        headers, body = self._envelope(method, parameters, task_id)
        resp = self._http.request(method, path, content=body, headers=headers)
        return _response(resp.status_code, resp.headers, resp.content)

    def jwks(self) -> dict[str, Any]:
        resp = self._http.get("/.well-known/jwks.json")
        resp.raise_for_status()
        doc: dict[str, Any] = orjson.loads(resp.content)
        return doc


def _response(status: int, headers: Mapping[str, str], content: bytes) -> AgtpResponse:
    try:
        doc = orjson.loads(content)
    except orjson.JSONDecodeError:
        text = content[:200].decode("utf-8", "replace")
        doc = {"status": status, "error": {"code": "not_agtp", "message": text}}
    return AgtpResponse(status, dict(headers), doc if isinstance(doc, dict) else {}, content)


class NativeAgtpClient(_Client):
    """The calls of :class:`AgtpClient` over the native AGTP/1.0 framing: one
    kept-alive connection, one request at a time. Connection and framing
    failures raise OSError (``ConnectionError`` for a server that breaks the
    framing). A native listener has no JWKS resource, so :meth:`jwks` takes
    the server's keys from its own signed Agent Manifest (DESCRIBE)."""

    def __init__(
        self,
        base_url: str,
        *,
        agent_id: str,
        principal_id: str,
        scope: str,
        timeout: float = 10.0,
        verify: bool | str = True,
        dialect: Dialect | str = Dialect.AGTP_02,
    ) -> None:
        super().__init__(base_url, agent_id, principal_id, scope, dialect)
        try:
            tls, host, port, _, _ = native_origin(self.base_url)
        except PeerError as exc:
            raise ValueError(exc.message) from None
        self._address = (host, port)
        self._timeout = timeout
        self._tls: ssl.SSLContext | None = None
        if tls:
            ctx = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_3
            if verify is False:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self._tls = ctx
        self._sock: socket.socket | None = None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self._address, timeout=self._timeout)
        if self._tls is None:
            return sock
        try:
            return self._tls.wrap_socket(sock, server_hostname=self._address[0])
        except BaseException:
            sock.close()
            raise

    def _exchange(self, sock: socket.socket, request: bytes) -> NativeResponse | None:
        """Send and read one answer; None when the server closed the connection
        before any byte of an answer (an idle kept-alive connection it dropped)."""
        sock.sendall(request)
        parser = NativeResponseParser(MAX_NATIVE_ANSWER)
        while True:
            data = sock.recv(65536)
            if not data:
                if parser.buffered:
                    raise ConnectionError("the server closed the connection mid-answer")
                return None
            try:
                answers = parser.feed(data)
            except AgtpError as exc:
                raise ConnectionError(f"bad AGTP framing from the server: {exc.message}") from None
            if answers:
                if len(answers) > 1 or parser.buffered:
                    raise ConnectionError("the server sent more than one answer")
                return answers[0]

    def call(
        self,
        method: str,
        parameters: Mapping[str, Any],
        *,
        task_id: str = "task-cli-1",
        path: str = "/",
    ) -> AgtpResponse:
        headers, body = self._envelope(method, parameters, task_id)
        try:
            target = path if self.dialect is Dialect.NEWER else None
            request = encode_request(method, headers, body, target=target)
        except ValueError as exc:
            raise ValueError(f"request cannot be framed: {exc}") from None
        reused = self._sock is not None
        for _ in range(2):
            if self._sock is None:
                self._sock = self._connect()
            try:
                answer = self._exchange(self._sock, request)
            except BaseException:
                self.close()  # never reuse a connection in an unknown state
                raise
            if answer is not None:
                return _response(answer.status, answer.headers, answer.body)
            self.close()
            if not reused:
                break
            reused = False  # a dropped idle connection: once more, fresh
        raise ConnectionError("the server closed the connection without answering")

    def jwks(self) -> dict[str, Any]:
        resp = self.call("DESCRIBE", {}, task_id="task-cli-describe")
        if resp.status != 200:
            raise ConnectionError(f"DESCRIBE answered {resp.status}")
        doc = resp.result
        if doc.get("document_type") == "agtp-identity":  # newer: the manifest is embedded
            doc = doc.get("agtp_manifest") or {}
        try:
            jwks: dict[str, Any] = manifest_jwks(doc)
        except PeerError as exc:
            raise ConnectionError(f"the server's manifest: {exc.message}") from None
        return jwks


def connect(
    base_url: str,
    *,
    agent_id: str,
    principal_id: str,
    scope: str,
    timeout: float = 10.0,
    verify: bool | str = True,
    dialect: Dialect | str = Dialect.AGTP_02,
) -> AgtpClient | NativeAgtpClient:
    """The client for ``base_url``: native framing for ``agtp[+cleartext]://``,
    the HTTP/2 binding otherwise."""
    kind = NativeAgtpClient if is_native(base_url) else AgtpClient
    return kind(
        base_url,
        agent_id=agent_id,
        principal_id=principal_id,
        scope=scope,
        timeout=timeout,
        verify=verify,
        dialect=dialect,
    )


def verify_attribution(resp: AgtpResponse, jwks: Mapping[str, Any]) -> dict[str, Any]:
    """A newer-dialect answer's ``Attribution-Record``, verified against the
    ANS keys, bound to this answer (status, body hash, ``Audit-ID``); return
    its payload. Raises :class:`UnsignedResponse` when there is none,
    :class:`~ans.protocol.errors.SignatureInvalid` when it does not hold."""
    headers = {k.lower(): v for k, v in resp.headers.items()}
    jws = headers.get("attribution-record")
    if not jws:
        raise UnsignedResponse("the answer carries no Attribution-Record")
    record = verify_record(jws, TrustedKeys.from_jwks(jwks))
    if record.get("response_status") != resp.status:
        raise SignatureInvalid("the Attribution-Record is for another status")
    if record.get("response_hash") != hashlib.sha256(resp.raw).hexdigest():
        raise SignatureInvalid("the Attribution-Record is for another body")
    if headers.get("audit-id") != hashlib.sha256(jws.encode("ascii")).hexdigest():
        raise SignatureInvalid("Audit-ID is not the hash of the Attribution-Record")
    return record


def verify_discover_result(
    result: Mapping[str, Any], jwks: Mapping[str, Any], parameters: Mapping[str, Any] | None = None
) -> str:
    """Return the signing kid, or raise AgtpError/KeyFileError if anything is off."""
    kid = verify_document(result, TrustedKeys.from_jwks(jwks), RESULT_SIGNATURE_FIELD)
    if parameters is not None and result.get("query_digest") != query_digest(parameters):
        raise AgtpError(
            "query_digest does not match the parameters sent", code=ErrorCode.DIGEST_MISMATCH
        )
    return str(kid)


def verify_discover_answer(
    resp: AgtpResponse,
    jwks: Mapping[str, Any],
    parameters: Mapping[str, Any] | None = None,
    task_id: str | None = None,
) -> str:
    """Any DISCOVER answer, verified: a 200's signed result (and its
    ``query_digest``), or a refusal's signed error object (its status, Task-ID
    and ``query_digest``). Return the signing kid; an unsigned answer raises
    :class:`UnsignedResponse` (discovery draft 3.4: it MUST be rejected)."""
    if resp.status == 200:
        result = resp.body.get("result")
        if not isinstance(result, dict) or RESULT_SIGNATURE_FIELD not in result:
            raise UnsignedResponse("the DISCOVER result is not signed; rejected")
        return verify_discover_result(result, jwks, parameters)
    return check_refusal(
        resp.status,
        resp.body,
        TrustedKeys.from_jwks(jwks),
        task_id=task_id,
        parameters=parameters,
    )
