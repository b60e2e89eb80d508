"""Helpers the commands share: strictly parsed JSON files, governance key
files, and left-aligned column printing."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _print_rows(rows: list[list[str]]) -> None:
    """Left-aligned columns, two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _read_json(path: Path) -> Any:
    """A JSON file, strictly parsed; a ValueError naming it when it is not
    (empty, not UTF-8, a duplicate key, ...)."""
    from ans.protocol import jsonstrict
    from ans.protocol.errors import AgtpError

    data = path.read_bytes()
    if not data.strip():
        raise ValueError(f"{path}: the file is empty; a JSON document is expected")
    try:
        return jsonstrict.loads(data, max_bytes=4 * 1024 * 1024)
    except AgtpError as exc:
        raise ValueError(f"{path}: not valid JSON: {exc.message}") from None


def _read_key(path: Path, kid: str | None) -> Any:
    """A governance private key (PEM); a ValueError naming the file."""
    from ans.governance.keys import KeyFileError, SigningKey

    try:
        return SigningKey.from_pem(path.read_bytes(), kid)
    except KeyFileError as exc:
        raise ValueError(f"{path}: {exc}") from None
