"""Text normalization shared by every capability index: word tokens, a fixed
English stop-word list, tag normalization, agent-label splitting and the
splitting of a multi-part intent into segments.

Everything here is fixed a priori (not fitted on any evaluation data).
"""

from __future__ import annotations

import re

# A standard English function-word list plus greeting/politeness words that
# carry no capability signal ("hey", "please"). Fixed; never tuned.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    i'm i've i'd you're it's let's please hey hi hello thanks""".split()
)

_WORD_RE = re.compile(r"[A-Za-z0-9]+(?:'[a-z]+)?")
_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_TAG_SEP_RE = re.compile(r"[^a-z0-9]+")
# Boundaries between the parts of a compound request: sentence ends, and
# coordinating words between clauses ("... news about Tesla and how ...").
_SEGMENT_RE = re.compile(
    r"\s*(?:[.?!;]+\s+|,\s*(?:and|but|then|also)\s+|"
    r"\s+(?:and also|and then|and|as well as|also|plus)\s+)",
    re.IGNORECASE,
)
MAX_SEGMENTS = 3


def words(text: str) -> list[str]:
    """Lowercased content words (stop words dropped)."""
    return [w for w in (m.lower() for m in _WORD_RE.findall(text)) if w not in STOPWORDS]


def content_text(text: str) -> str:
    """The text an embedder sees: content words only (the original if none)."""
    kept = words(text)
    return " ".join(kept) if kept else text


def split_label(label: str) -> str:
    """'HousePurchasingTool' -> 'House Purchasing Tool'; 'a-b' -> 'a b'."""
    spaced = _CAMEL_RE.sub(" ", label.replace("_", " ").replace("-", " "))
    return " ".join(spaced.split())


def normalize_tag(tag: str) -> str:
    """Lowercase, hyphen-joined: 'Invoice Processing' -> 'invoice-processing'."""
    return _TAG_SEP_RE.sub("-", tag.lower()).strip("-")


def candidate_tags(text: str, max_n: int = 3) -> set[str]:
    """Every 1..max_n word n-gram of the text in normalized tag form (stop words kept
    inside n-grams, so 'question-and-answer' can match)."""
    toks = [m.lower() for m in _WORD_RE.findall(text)]
    # A word token is alphanumeric runs joined by at most one apostrophe, so
    # its tag form only turns the apostrophe into "-", and "-".join of tag-form
    # tokens is already normalize_tag of the n-gram (no regex per n-gram).
    tagged = [t.replace("'", "-") for t in toks]
    out = {t for t, raw in zip(tagged, toks, strict=True) if raw not in STOPWORDS}
    for n in range(2, max_n + 1):
        for i in range(len(tagged) - n + 1):
            out.add("-".join(tagged[i : i + n]))
    out.discard("")
    return out


def segments(intent: str) -> list[str]:
    """The parts of a compound intent, or [] when it has only one part.

    Parts with fewer than two content words are dropped; at most MAX_SEGMENTS
    parts are used (the longest ones, kept in their original order)."""
    parts = [p for p in _SEGMENT_RE.split(intent) if len(words(p)) >= 2]
    if len(parts) < 2:
        return []
    if len(parts) > MAX_SEGMENTS:
        keep = sorted(range(len(parts)), key=lambda i: (-len(parts[i]), i))[:MAX_SEGMENTS]
        parts = [parts[i] for i in sorted(keep)]
    return parts
