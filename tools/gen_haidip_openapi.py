"""Write ans/openapi/haidip.json, the OpenAPI 3.1 document of the HAIDIP
surface (served at GET {base}/openapi.json). Run after changing the surface:
``python tools/gen_haidip_openapi.py``; tests/ans/test_haidip_openapi_doc.py
checks that the committed file is what this script writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

B = "/haidip/v1"
OUT = Path(__file__).resolve().parent.parent / "ans" / "openapi" / "haidip.json"
CODES = [
    "InvalidInput",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "MethodNotAllowed",
    "RequestTimeout",
    "Conflict",
    "Gone",
    "PayloadTooLarge",
    "UnsupportedMediaType",
    "InvalidCard",
    "RateLimited",
    "AgentError",
    "AgentSuspended",
    "Unavailable",
    "AgentTimeout",
]
ERRORS = {
    "400": "Invalid input (InvalidInput)",
    "401": "Credentials missing or invalid (Unauthorized)",
    "403": "Scope or zone not granted (Forbidden)",
    "404": "No such agent visible to the caller, or a switched-off route (NotFound)",
    "405": "Method not allowed on this path (MethodNotAllowed)",
    "408": "The request body did not arrive in time (RequestTimeout)",
    "409": "Conflict with a stored record (Conflict)",
    "410": "The agent is retired: Revoked or Deprecated (Gone)",
    "413": "Request body over the size limit (PayloadTooLarge)",
    "415": "Content-Type is not JSON (UnsupportedMediaType)",
    "422": "The agent card is malformed (InvalidCard)",
    "429": "Rate limited (RateLimited); see Retry-After",
    "502": "The agent answered badly or could not be reached (AgentError)",
    "503": "The agent is suspended (AgentSuspended) or the service is unavailable (Unavailable)",
    "504": "The agent did not answer in time (AgentTimeout)",
}


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def errs(*codes: str) -> dict[str, Any]:
    return {
        c: {"description": ERRORS[c], "content": {"application/json": {"schema": ref("Error")}}}
        for c in codes
    }


def one_or_many(max_items: int = 16) -> dict[str, Any]:
    return {
        "oneOf": [
            {"type": "string", "maxLength": 128},
            {"type": "array", "items": {"type": "string", "maxLength": 128}, "maxItems": max_items},
        ]
    }


STRLIST = {"type": "array", "items": {"type": "string"}}
IDENTITY = [
    {
        "name": "Agent-ID",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "maxLength": 1024},
        "description": "The caller's agent id (with Principal-ID and Authority-Scope)",
    },
    {
        "name": "Principal-ID",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "maxLength": 1024},
    },
    {
        "name": "Authority-Scope",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "maxLength": 4096},
        "description": "Space-separated scopes: discovery:query (list, search, get), "
        "discovery:register (upload), agents:invoke (invoke), zone:* tokens",
    },
]
ID_PARAM = {
    "name": "id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1, "maxLength": 512},
    "description": "The agent's HAIDIP id (percent-encode a URI id)",
}
LIST_PARAMS = [
    {
        "name": name,
        "in": "query",
        "required": False,
        "schema": {"type": "string", "maxLength": 128},
        "description": text,
    }
    for name, text in (
        ("capability", "A capability every result holds (repeatable, comma-separated)"),
        ("language", "A supported language every result declares (e.g. en)"),
        ("tag", "A tag every result holds"),
        ("protocol", "A binding protocol (any of the given)"),
        ("provider", "The provider's name"),
    )
] + [
    {
        "name": "top",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
    },
    {
        "name": "skip",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 0, "maximum": 100000, "default": 0},
    },
    {
        "name": "cursor",
        "in": "query",
        "required": False,
        "schema": {"type": "string", "maxLength": 1024},
        "description": "next_cursor of the previous page (opaque)",
    },
    {
        "name": "If-None-Match",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "maxLength": 1024},
    },
]

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"enum": CODES},
                    "message": {"type": "string", "maxLength": 300},
                    "correlation_id": {"type": "string"},
                    "detail": {"type": "string"},
                },
            }
        },
    },
    "Signature": {
        "type": "object",
        "required": ["algorithm", "key_id", "value"],
        "properties": {
            "algorithm": {"const": "ES256"},
            "key_id": {"type": "string"},
            "value": {"type": "string"},
        },
    },
    "AgentSummary": {
        "type": "object",
        "required": ["id", "name", "description", "canonical_id", "trust_tier", "governed"],
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "description": {"type": "string"},
            "capabilities": STRLIST,
            "endpoint": {"type": ["string", "null"]},
            "protocols": STRLIST,
            "canonical_id": {"type": "string"},
            "trust_tier": {"type": "integer", "minimum": 1, "maximum": 3},
            "behavioral_trust_score": {"type": "number"},
            "governed": {"type": "boolean"},
            "governance_zone": {"type": "string"},
            "last_update": {"type": "string"},
        },
    },
    "SearchResult": {
        "allOf": [
            ref("AgentSummary"),
            {
                "type": "object",
                "properties": {
                    "score": {
                        "type": ["number", "null"],
                        "description": "rank_score: 0.3 trust tier + 0.4 behavioral + 0.3 "
                        "capability match, among agents past the relevance gate",
                    },
                    "rank": {"type": ["integer", "null"]},
                    "capability_match_score": {"type": ["number", "null"]},
                    "score_components": {"type": "object"},
                    "card": ref("AgentCard"),
                },
            },
        ]
    },
    "AgentCard": {
        "type": "object",
        "required": ["id", "name", "description"],
        "additionalProperties": True,
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "description": {"type": "string"},
            "capabilities": STRLIST,
            "operations": {"type": "array", "items": {"type": "object"}},
            "inputs": {"type": ["object", "array"]},
            "outputs": {"type": ["object", "array"]},
            "endpoint": {"type": ["string", "null"]},
            "authentication": {},
            "supported_languages": STRLIST,
            "tags": STRLIST,
            "protocols": STRLIST,
            "version": {},
            "provider": {},
            "license": {},
            "certification": {"description": "The provider's own claim"},
            "last_update": {"type": "string"},
            "ans": {
                "type": "object",
                "description": "What this ANS vouches for (never the card's own claims)",
                "properties": {
                    "canonical_id": {"type": "string"},
                    "trust_tier": {"type": "integer"},
                    "behavioral_trust_score": {"type": "number"},
                    "governed": {"type": "boolean"},
                    "governance_zone": {"type": "string"},
                    "org_domain": {"type": "string"},
                    "card_format": {"enum": ["haidip", "a2a"]},
                },
            },
            "generated_at": {"type": "string"},
            "ans_signature": ref("Signature"),
        },
    },
    "Filters": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "capabilities": one_or_many(),
            "capability": one_or_many(),
            "supported_language": one_or_many(),
            "language": one_or_many(),
            "tags": one_or_many(),
            "protocols": one_or_many(),
            "authentication": one_or_many(),
            "provider": {"type": "string", "maxLength": 128},
            "certification": {
                "oneOf": [
                    {"enum": ["verified", "governed", "any"]},
                    {"type": "boolean"},
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "verified": {"type": "boolean"},
                            "governed": {"type": "boolean"},
                        },
                    },
                ]
            },
        },
    },
    "SearchRequest": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "query": {"type": "string", "maxLength": 2000},
            "filters": ref("Filters"),
            "top": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
            "skip": {
                "type": "integer",
                "minimum": 0,
                "maximum": 99,
                "default": 0,
                "description": "skip + top <= 100 (a search ranks the best 100)",
            },
            "ranked": {"type": "boolean", "default": True},
            "include_metadata": {"type": "boolean", "default": False},
            "trust_tier_min": {"type": "integer", "minimum": 1, "maximum": 3},
        },
        "example": {
            "query": "summarize an English document",
            "filters": {"capabilities": ["summarization"], "supported_language": "en"},
            "top": 3,
        },
    },
    "SearchResponse": {
        "type": "object",
        "required": [
            "results",
            "count",
            "top",
            "skip",
            "search_time",
            "query_digest",
            "generated_at",
            "ans_signature",
        ],
        "properties": {
            "results": {"type": "array", "items": ref("SearchResult")},
            "count": {"type": "integer"},
            "top": {"type": "integer"},
            "skip": {"type": "integer"},
            "query": {"type": ["string", "null"]},
            "filters": {"type": "object"},
            "ranked": {"type": "boolean"},
            "search_time": {"type": "number", "description": "milliseconds"},
            "query_id": {"type": "string"},
            "query_digest": {
                "type": "string",
                "description": "SHA-256 of the RFC 8785 bytes of the request body",
            },
            "generated_at": {"type": "string"},
            "ranking": {"type": ["string", "null"]},
            "relevance": {"type": "object"},
            "warnings": {"type": "array"},
            "ans_signature": ref("Signature"),
        },
    },
    "AgentList": {
        "type": "object",
        "required": ["agents", "count", "top", "skip", "next_cursor", "generated_at"],
        "properties": {
            "agents": {"type": "array", "items": ref("AgentSummary")},
            "count": {"type": "integer"},
            "top": {"type": "integer"},
            "skip": {"type": "integer"},
            "next_cursor": {"type": ["string", "null"]},
            "filters": {"type": "object"},
            "generated_at": {"type": "string"},
            "ans_signature": ref("Signature"),
        },
    },
    "A2ACard": {
        "type": "object",
        "required": ["name", "description", "url", "version", "skills"],
        "properties": {
            "protocolVersion": {"type": "string"},
            "name": {"type": "string"},
            "description": {"type": "string"},
            "url": {"type": "string"},
            "version": {"type": "string"},
            "provider": {"type": "object"},
            "capabilities": {"type": "object"},
            "defaultInputModes": STRLIST,
            "defaultOutputModes": STRLIST,
            "skills": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "name", "description", "tags"],
                    "properties": {
                        "id": {"type": "string"},
                        "name": {"type": "string"},
                        "description": {"type": "string"},
                        "tags": STRLIST,
                        "examples": STRLIST,
                        "inputModes": STRLIST,
                        "outputModes": STRLIST,
                    },
                },
            },
            "securitySchemes": {"type": "object"},
            "security": {"type": "array"},
        },
    },
}


def json_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def document() -> dict[str, Any]:
    agents = {
        "get": {
            "operationId": "listAgents",
            "summary": "List the agents the caller may see (canonical-id order)",
            "parameters": IDENTITY + LIST_PARAMS,
            "responses": {
                "200": {
                    "description": "A page of agents",
                    "headers": {
                        "ETag": {
                            "schema": {"type": "string"},
                            "description": "Covers the change-feed position, the query and "
                            "the caller's entitlement",
                        }
                    },
                    "content": json_body(ref("AgentList")),
                },
                "304": {"description": "Not modified (If-None-Match matched the ETag)"},
                **errs("400", "401", "403", "429", "503"),
            },
        },
        "post": {
            "operationId": "registerCard",
            "summary": "Register a HAIDIP or A2A card as a self-asserted tier-3 record "
            "(only with [haidip] card_upload; else 404)",
            "parameters": IDENTITY,
            "requestBody": {"required": True, "content": json_body({"type": "object"})},
            "responses": {
                "200": {"description": "Unchanged", "content": json_body({"type": "object"})},
                "201": {"description": "Admitted", "content": json_body({"type": "object"})},
                **errs("400", "401", "403", "404", "409", "410", "413", "415", "422", "429", "503"),
            },
        },
    }
    search = {
        "post": {
            "operationId": "searchAgents",
            "summary": "Semantic search, ranked like AGTP DISCOVER, signed",
            "parameters": IDENTITY,
            "requestBody": {"required": True, "content": json_body(ref("SearchRequest"))},
            "responses": {
                "200": {
                    "description": "Ranked results",
                    "content": json_body(ref("SearchResponse")),
                },
                **errs("400", "401", "403", "413", "415", "429", "503"),
            },
        }
    }
    get_agent = {
        "get": {
            "operationId": "getAgent",
            "summary": "The agent's HAIDIP card, signed",
            "parameters": [ID_PARAM, *IDENTITY],
            "responses": {
                "200": {"description": "The card", "content": json_body(ref("AgentCard"))},
                **errs("400", "401", "403", "404", "410", "429", "503"),
            },
        }
    }
    invoke = {
        "post": {
            "operationId": "invokeAgent",
            "summary": "Invoke the agent through the gateway (scope agents:invoke)",
            "parameters": [ID_PARAM, *IDENTITY],
            "requestBody": {
                "required": True,
                "description": "Any JSON object, forwarded to the agent (size capped)",
                "content": json_body({"type": "object"}),
            },
            "responses": {
                "200": {
                    "description": "The agent's answer, passed through (any content type, "
                    "text/event-stream streamed)",
                    "content": {
                        "application/json": {"schema": {}},
                        "text/event-stream": {"schema": {"type": "string"}},
                        "*/*": {"schema": {}},
                    },
                },
                **errs("400", "401", "403", "404", "410", "413", "429", "502", "503", "504"),
            },
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "ANS HAIDIP surface",
            "version": "1.0.0",
            "description": "HAIDIP (draft-cui-ai-agent-discovery-invocation) over the AGTP "
            "Agent Name Service: list, search and fetch agents (answers signed with the ANS "
            "key: ES256 over RFC 8785 bytes, keys at /.well-known/jwks.json) and invoke them "
            'through the gateway. Errors are {"error": {"code", "message"}}; see docs/haidip.md.',
        },
        "servers": [{"url": "/"}],
        "paths": {
            f"{B}/agents": agents,
            f"{B}/agents/search": search,
            f"{B}/agents/{{id}}": get_agent,
            f"{B}/agents/{{id}}/invoke": invoke,
            f"{B}/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document",
                    "responses": {
                        "200": {
                            "description": "OpenAPI 3.1",
                            "content": json_body({"type": "object"}),
                        }
                    },
                }
            },
            "/.well-known/agent-card.json": {
                "get": {
                    "operationId": "ownAgentCard",
                    "summary": "This ANS as an A2A agent card (its skills: the surfaces it offers)",
                    "responses": {
                        "200": {
                            "description": "A2A agent card",
                            "content": json_body(ref("A2ACard")),
                        }
                    },
                }
            },
        },
        "components": {"schemas": SCHEMAS},
    }


def render() -> str:
    return json.dumps(document(), indent=1) + "\n"


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT}")
