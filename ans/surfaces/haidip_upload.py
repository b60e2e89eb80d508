"""HAIDIP card upload (``POST {base}/agents``, ``[haidip] card_upload``):
a HAIDIP or A2A card admitted as a self-asserted tier-3 record through the
registrar (:meth:`Registrar.admit_self_asserted`: ``discovery:register``,
conflicts, staleness, audited there), and the audit records of the refusals
this surface decides itself (upload switched off, a malformed card)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ans.governance.policy import requester_fields
from ans.governance.signing import RESULT_SIGNATURE_FIELD, sign_document
from ans.protocol.errors import AgtpError, ErrorCode
from ans.protocol.haidip_cards import capabilities_from_card
from ans.protocol.messages import Identity, parse_identity

from ..service import AnsService

SOURCE = "haidip"


async def admit_card(
    svc: AnsService, card: dict[str, Any], identity: Identity, correlation: str
) -> tuple[int, dict[str, Any]]:
    """(201 admitted or 200 unchanged, the signed registrar answer); a
    malformed card is 422, audited as ``self_asserted_refused``."""
    try:
        caps = capabilities_from_card(card)
    except AgtpError as exc:
        svc.audit.record(
            "self_asserted_refused",
            status=exc.status,
            code=exc.code,
            **requester_fields(identity, SOURCE, correlation),
            source=SOURCE,
            profile_id=str(card.get("id", card.get("url", "")))[:256],
            reason=exc.message,
        )
        raise
    result = await asyncio.to_thread(
        svc.admit_self_asserted, caps, source=SOURCE, identity=identity, task_id=correlation
    )
    status = 200 if result.get("unchanged") else 201
    return status, sign_document(result, svc.key, RESULT_SIGNATURE_FIELD)


def audit_upload_off(svc: AnsService, headers: Mapping[str, str], correlation: str) -> None:
    """An upload while ``card_upload`` is off: audited as a refused
    registration, naming the identity headers as sent (bounded)."""
    try:
        who = requester_fields(parse_identity(headers), SOURCE, correlation)
    except AgtpError:
        who = {"method": SOURCE, "task_id": correlation}
    svc.audit.record(
        "self_asserted_refused",
        status=404,
        code=ErrorCode.NOT_FOUND,
        **who,
        source=SOURCE,
        reason="card upload is not enabled ([haidip] card_upload)",
    )
