"""Authority-Scope grammar (draft-hood-independent-agtp-02, Appendix A).

A header value is a space-separated list of tokens ``domain:action``,
``domain:*``, ``*:action`` or ``*:*``; tokens are lowercase ASCII with a
single colon. Anything else is rejected with 400 ``invalid_authority_scope``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InvalidAuthorityScope

MAX_SCOPE_HEADER = 4096
MAX_SCOPE_TOKENS = 64
_PART = r"(?:\*|[a-z0-9][a-z0-9._-]{0,63})"
_TOKEN_RE = re.compile(rf"({_PART}):({_PART})")


@dataclass(frozen=True, slots=True, order=True)
class ScopeToken:
    domain: str
    action: str

    def __str__(self) -> str:
        return f"{self.domain}:{self.action}"

    def covers(self, required: ScopeToken) -> bool:
        """True if this (possibly wildcard) token grants ``required``."""
        return self.domain in ("*", required.domain) and self.action in ("*", required.action)


def parse_token(text: str) -> ScopeToken:
    m = _TOKEN_RE.fullmatch(text)
    if m is None:
        raise InvalidAuthorityScope(
            f"scope token {text[:80]!r} is not lowercase ASCII 'domain:action' "
            "(or domain:*, *:action, *:*) with a single colon"
        )
    return ScopeToken(m.group(1), m.group(2))


@dataclass(frozen=True, slots=True)
class AuthorityScope:
    """A parsed Authority-Scope header: an ordered, de-duplicated token set."""

    tokens: tuple[ScopeToken, ...]

    def __str__(self) -> str:
        return " ".join(str(t) for t in self.tokens)

    def covers(self, required: ScopeToken | str) -> bool:
        req = parse_token(required) if isinstance(required, str) else required
        return any(t.covers(req) for t in self.tokens)

    def intersect(self, other: AuthorityScope) -> AuthorityScope:
        """Tokens of ``self`` that ``other`` also grants (effective scope)."""
        return AuthorityScope(tuple(t for t in self.tokens if other.covers(t)))


def parse_authority_scope(value: str) -> AuthorityScope:
    """Parse a header value; raise InvalidAuthorityScope on any deviation."""
    if len(value) > MAX_SCOPE_HEADER:
        raise InvalidAuthorityScope(f"Authority-Scope longer than {MAX_SCOPE_HEADER} bytes")
    # Tokens are separated by spaces; tabs or other whitespace are not the grammar.
    parts = [p for p in value.split(" ") if p]
    if not parts:
        raise InvalidAuthorityScope("Authority-Scope is empty")
    if len(parts) > MAX_SCOPE_TOKENS:
        raise InvalidAuthorityScope(f"Authority-Scope has more than {MAX_SCOPE_TOKENS} tokens")
    seen: dict[ScopeToken, None] = {}
    for p in parts:
        seen.setdefault(parse_token(p), None)
    return AuthorityScope(tuple(seen))
