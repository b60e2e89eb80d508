"""Name resolution (discovery-01 section 4: ANS is the naming layer).

A human-readable name resolves to the Canonical Agent-ID and the agent's
manifest: ``label.org_domain`` (``solidity-auditor.auditor.tld``, also
written ``agtp://auditor.tld/agents/solidity-auditor`` or
``agtp://agtp.auditor.tld/agents/solidity-auditor``), or an explicit name
the manifest declares in its ``name`` field, which counts only when it ends
in ``.`` + the agent's own ``org_domain`` (an organisation names agents in
its own domain only). A canonical id (64 hex, ``agtp://<id>``) resolves to
itself when indexed.

Resolution is a DISCOVER whose criterion is the name: the same request gate
(authentication, rate limits), the same ``discovery:query`` scope (451/455)
and requested-zone (453/457) checks, the same hard gates (lifecycle Active,
trust tier, behavioral floor, zone, org, restricted zones) and the same
signed result object; each item also carries the agent's signed
``manifest``. A name takes no capability criteria (intent, tags, ...): 422
``invalid_name`` rather than an answer that ignored them. No visible match
is 404 ``name_not_found`` (signed, like every DISCOVER refusal): a name in a
restricted zone the caller may not see does not exist for it.
"""

from __future__ import annotations

from typing import Any

from ans.governance.audit import rfc3339
from ans.governance.policy import first_failed_gate
from ans.governance.signing import RESULT_SIGNATURE_FIELD, signature_object
from ans.protocol.errors import ErrorCode, InvalidParameter, NotFound
from ans.protocol.jcs import canonicalize
from ans.protocol.messages import DiscoverRequest, Identity
from ans.protocol.newer import AgentRef, agent_ref

from ..registry import AgentEntry
from .context import CoreContext
from .live_index import LiveIndex

# Candidates a name can have (label collisions across zones are possible).
MAX_CANDIDATES = 64


class NameResolver:
    def __init__(self, ctx: CoreContext, index: LiveIndex) -> None:
        self.ctx = ctx
        self.index = index

    def candidates(self, ref: AgentRef) -> list[str]:
        """Indexed canonical ids ``ref`` names (before any gate)."""
        registry = self.index.registry
        if ref.canonical_id is not None:
            with self.index.lock:
                return [ref.canonical_id] if ref.canonical_id in registry else []
        assert ref.name is not None
        labels = ref.name.split(".")
        found: list[str] = []
        with self.index.lock:  # a canonical id with dots in it reads as a name
            if ref.name in registry:
                found.append(ref.name)
        for i in range(1, len(labels)):
            org = ".".join(labels[i:])
            with self.index.lock:
                ids = registry.ids_in_org(org)
            if not ids:
                continue
            head = ".".join(labels[:i])
            fields = self.index.result_fields(ids) if i == 1 else {}
            found += [
                cid
                for cid in ids
                if str(fields.get(cid, {}).get("agent_label", "")).lower() == head
            ]
            # Explicit names: read the manifests of this org's agents once.
            for cid, stored in self.ctx.store.get_many(ids).items():
                explicit = stored.manifest.get("name")
                if (
                    isinstance(explicit, str)
                    and explicit.lower().rstrip(".") == ref.name
                    and ref.name.endswith("." + org)
                    and cid not in found
                ):
                    found.append(cid)
        return found[:MAX_CANDIDATES]

    def by_name(self, text: str, identity: Identity) -> str | None:
        """The first visible agent ``text`` names when it reads as a name or
        an agtp:// URI (DESCRIBE by name), else None."""
        try:
            ref = agent_ref(text)
        except ValueError:
            return None
        if ref.name is None and ref.canonical_id == text:
            return None  # a plain id that is not indexed: not a name
        found = self.visible(ref, identity)
        return found[0] if found else None

    def visible(self, ref: AgentRef, identity: Identity) -> list[str]:
        """Candidates a caller with ``identity`` may see (Active, restricted
        zones granted), for DESCRIBE by name."""
        out = []
        for cid in self.candidates(ref):
            with self.index.lock:
                entry = self.index.registry.get(cid)
            if entry is not None and self.ctx.zones.granted(entry.governance_zone, identity.scope):
                out.append(cid)
        return out

    def resolve(self, req: DiscoverRequest, ref: AgentRef) -> dict[str, Any]:
        """The signed answer of a DISCOVER with a ``name`` (scope and zone
        already checked by the caller, :meth:`Discovery.check_scope_and_zone`)."""
        ctx, p = self.ctx, req.params
        if (
            p.intent is not None
            or p.capability_domains
            or p.preferred_agent is not None
            or p.profile.filters
            or p.profile.preferred_tags
        ):
            raise InvalidParameter(
                "name",
                "name resolution takes no capability criteria (intent, query, "
                "capability_domains, tags, protocols, constraints, preferred_agent): ask "
                "for the name alone, with trust, zone or org gates if you like",
            )
        passing: list[AgentEntry] = []
        for cid in self.candidates(ref):
            with self.index.lock:
                entry = self.index.registry.get(cid)
            if (
                entry is not None
                and first_failed_gate(entry, p, req.identity.scope, ctx.zones) is None
            ):
                passing.append(entry)
        if not passing:
            shown = ref.name if ref.name is not None else ref.canonical_id
            raise NotFound(
                f"no Active agent visible to you is named {str(shown)[:120]!r}",
                code=ErrorCode.NAME_NOT_FOUND,
            )
        passing.sort(key=lambda e: (e.trust_tier, -e.behavioral_trust_score, e.canonical_id))
        chosen = passing[: p.limit]
        stored = ctx.store.get_many([e.canonical_id for e in chosen])
        fields = self.index.result_fields([e.canonical_id for e in chosen])
        results = []
        for rank, e in enumerate(chosen, start=1):
            if e.canonical_id not in stored or e.canonical_id not in fields:
                continue  # deleted meanwhile
            item: dict[str, Any] = {"rank": rank, **fields[e.canonical_id]}
            if p.scope_negotiate:
                item["required_scope"] = e.required_scope
            item["manifest"] = stored[e.canonical_id].manifest
            results.append(item)
        result: dict[str, Any] = {
            "query_id": f"qry-{ctx.new_id()}",
            "total_matches": len(passing),
            "returned": len(results),
            "results": results,
            "resolution": {
                "name": ref.name if ref.name is not None else ref.canonical_id,
                "canonical_id": results[0]["canonical_id"] if results else None,
            },
            "generated_at": rfc3339(ctx.clock()),
            "query_digest": req.query_digest,
        }
        if p.profile.unsupported_filters:
            result["unsupported_filters"] = list(p.profile.unsupported_filters)
        result[RESULT_SIGNATURE_FIELD] = signature_object(canonicalize(result), ctx.key)
        return result
