"""An interned string table: value <-> small int code (the registry's zone,
org, scope and key columns; the profile filter columns' values)."""

from __future__ import annotations

import sys


class Codes:
    def __init__(self) -> None:
        self.values: list[str] = []
        self.code_of: dict[str, int] = {}

    def code(self, value: str) -> int:
        """The value's code, a new one (the next int) for a value not seen yet."""
        c = self.code_of.get(value)
        if c is None:
            c = len(self.values)
            value = sys.intern(value)
            self.values.append(value)
            self.code_of[value] = c
        return c
