"""The ``[haidip]`` section: the HAIDIP REST surface (draft-cui; DESIGN.md
"Surfaces") — whether it is served, under which base path, whether
unauthenticated callers may list/search/get agents in public zones, whether
``POST {base}/agents`` admits self-asserted cards, and which trust tiers its
list and search admit by default.

The nested table ``[haidip.invoke]`` belongs to the invocation gateway,
which parses it itself: :func:`haidip_from_table` skips the key ``invoke``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

HAIDIP_PATH_RE = re.compile(r"(?:/[A-Za-z0-9._~-]+){1,8}")
# Paths the HAIDIP base path may not take over (other routes of the server).
RESERVED_FIRST_SEGMENTS = ("agtp", ".well-known", "healthz", "readyz", "metrics")
# The nested table another module owns.
SKIPPED_KEYS = frozenset({"invoke"})


class HaidipConfigError(ValueError):
    """The ``[haidip]`` section is unusable."""


@dataclass(frozen=True, slots=True)
class HaidipSettings:
    """``[haidip]``. ``trust_tier_min`` is the default of list and search:
    3 admits self-asserted (tier-3) cards, ranked below governed agents; a
    search may narrow it (``filters.certification`` or ``trust_tier_min``)."""

    enabled: bool = True
    base_path: str = "/haidip/v1"
    public_listing: bool = False
    card_upload: bool = False
    trust_tier_min: int = 3

    def problems(self) -> list[str]:
        if HAIDIP_PATH_RE.fullmatch(self.base_path) is None:
            return [
                "base_path must be an absolute path such as /haidip/v1 "
                "(1 to 8 segments of A-Z a-z 0-9 . _ ~ -, no trailing slash)"
            ]
        if self.base_path.split("/")[1] in RESERVED_FIRST_SEGMENTS:
            return [f"base_path {self.base_path!r} would hide an ANS route"]
        if self.trust_tier_min not in (1, 2, 3):
            return ["trust_tier_min must be 1, 2 or 3"]
        return []


_BOOLS = ("enabled", "public_listing", "card_upload")


def haidip_from_table(table: Mapping[str, Any]) -> HaidipSettings:
    """Parse ``[haidip]`` (every bad value raises :class:`HaidipConfigError`);
    the nested ``invoke`` table is left to the invocation gateway."""
    if not isinstance(table, Mapping):
        raise HaidipConfigError("[haidip] must be a table")
    known = {f.name for f in fields(HaidipSettings)}
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key in SKIPPED_KEYS:
            continue
        if key not in known:
            raise HaidipConfigError(f"unknown key {key!r} in [haidip]")
        if key in _BOOLS:
            if not isinstance(value, bool):
                raise HaidipConfigError(f"[haidip] {key} must be true or false")
        elif key == "base_path":
            if not isinstance(value, str):
                raise HaidipConfigError("[haidip] base_path must be a string")
            value = value.strip()
        elif key == "trust_tier_min" and (isinstance(value, bool) or not isinstance(value, int)):
            raise HaidipConfigError("[haidip] trust_tier_min must be the integer 1, 2 or 3")
        values[key] = value
    settings = HaidipSettings(**values)
    problems = settings.problems()
    if problems:
        raise HaidipConfigError(f"[haidip]: {problems[0]}")
    return settings
