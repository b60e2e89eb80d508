"""A Query message's answer (seed 002 section 4.1.2 -> 4.1.3): Response
messages with ``matched`` set.

Two sources, one order: first the live announced agents that list the
capability by name (``match: "capability"``; ``query.agent_id`` narrows to one
agent, which is answered with ``matched: false`` when it does not list it),
then -- the capability read as free text -- the announced agents the core's
DISCOVER matches for it (``match: "relevance"``, with its ``rank_score``):
the same capability index and relevance gate as AGTP DISCOVER, with tier 3
admitted, never a second index. Governed agents that were never announced
are not MCP agents and are not answered here (AGTP DISCOVER serves them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ans.protocol.mcp_messages import Query
from ans.protocol.messages import DiscoverRequest, parse_discover_params, query_digest

from .records import agent_id_of, has_capability

if TYPE_CHECKING:
    from .registry import McpCaller, McpRegistry

# Agents a free-text capability may add (the DISCOVER limit).
MAX_RELEVANCE_RESULTS = 50


def match_query(registry: McpRegistry, q: Query, caller: McpCaller) -> list[dict[str, Any]]:
    version = q.version.text
    if q.agent_id is not None:
        one = registry.live(q.agent_id)
        if one is None:
            return []
        listed = has_capability(one.agent, q.capability)
        return [registry.view(one, version, listed, match="capability" if listed else None)]
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    limit = registry.settings.max_page_size
    for live in registry.iter_live():
        if len(out) >= limit:
            break
        if has_capability(live.agent, q.capability):
            out.append(registry.view(live, version, True, match="capability"))
            seen.add(live.trust.agent_id)
    for agent_id, score in relevant(registry, q, caller):
        if len(out) >= limit:
            break
        if agent_id in seen:
            continue
        found = registry.live(agent_id)
        if found is None:
            continue
        seen.add(agent_id)
        out.append(registry.view(found, version, True, match="relevance", rank_score=score))
    return out


def relevant(registry: McpRegistry, q: Query, caller: McpCaller) -> list[tuple[str, float]]:
    """(agent_id, rank_score) of the announced agents DISCOVER matches for
    the capability as an intent (tier 3 admitted), best first."""
    svc = registry.service
    params = {
        "intent": q.capability,
        "trust_tier_min": 3,
        "limit": min(MAX_RELEVANCE_RESULTS, svc.limits.max_limit),
    }
    req = DiscoverRequest(
        identity=caller.identity,
        task_id=caller.task_id,
        params=parse_discover_params(params, svc.limits),
        query_digest=query_digest(params),
        raw_parameters=params,
    )
    result = svc.discover(req)
    out: list[tuple[str, float]] = []
    for item in result.get("result", result).get("results", []):
        agent_id = agent_id_of(str(item.get("canonical_id", "")))
        if agent_id is not None:
            out.append((agent_id, float(item.get("rank_score", 0.0))))
    return out
