"""Vocabularies and templates for synthetic catalogs (used by :mod:`tools.synth`).

The data lives in ``synth_vocab.json`` beside this file: fifty-odd capability
domains (verbs for agent text, query verbs for paraphrased intents, objects,
focus points, artefacts, tools, modalities, tags, label words and example-task
templates with ``{slot}`` placeholders), the governance zones, the org-name
parts, and the sentence and query templates. This module only loads it into
immutable Python values; no RNG, no I/O beyond that one read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("synth_vocab.json")


@dataclass(frozen=True, slots=True)
class Domain:
    """One capability domain: everything needed to write agents and queries about it."""

    key: str
    name: str
    group: str
    zones: tuple[str, ...]
    scopes: tuple[str, ...]
    methods: tuple[str, ...]
    verbs: tuple[str, ...]
    qverbs: tuple[str, ...]
    objects: tuple[str, ...]
    focus: tuple[str, ...]
    artefacts: tuple[str, ...]
    tools: tuple[str, ...]
    modalities: tuple[str, ...]
    tags: tuple[str, ...]
    label_words: tuple[str, ...]
    examples: tuple[str, ...]


def _domain(raw: dict[str, Any]) -> Domain:
    values: dict[str, Any] = {
        f.name: raw[f.name] if isinstance(raw[f.name], str) else tuple(raw[f.name])
        for f in fields(Domain)
    }
    return Domain(**values)


def _strings(raw: list[str]) -> tuple[str, ...]:
    return tuple(raw)


def _table(raw: dict[str, list[str]]) -> dict[str, tuple[str, ...]]:
    return {k: tuple(v) for k, v in raw.items()}


_DOC: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))

DOMAINS: tuple[Domain, ...] = tuple(_domain(d) for d in _DOC["domains"])
ZONES = _strings(_DOC["zones"])
SLOTS = _table(_DOC["slots"])
ORG_PREFIXES = _strings(_DOC["org_prefixes"])
SECTOR_WORDS = _table(_DOC["sector_words"])
ORG_TLDS = _strings(_DOC["org_tlds"])
ORG_FORMS = _strings(_DOC["org_forms"])
LABEL_SUFFIXES = _strings(_DOC["label_suffixes"])
LEAD_SENTENCES = _strings(_DOC["lead_sentences"])
TOOL_SENTENCES = _strings(_DOC["tool_sentences"])
SECOND_DOMAIN_SENTENCES = _strings(_DOC["second_domain_sentences"])
QUERY_TEMPLATES = _strings(_DOC["query_templates"])
COMPOUND_QUERY_TEMPLATES = _strings(_DOC["compound_query_templates"])
SYNONYMS = _table(_DOC["synonyms"])
