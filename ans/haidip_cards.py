"""``ans import-cards``: HAIDIP and A2A agent cards from a file or a
directory into the registry, each as a self-asserted tier-3 record
(:meth:`Registrar.admit_self_asserted`, DESIGN.md "Self-asserted records").

A file holds one card (a JSON object) or a JSON array of cards; a directory
is read for its ``*.json`` files (sorted, not recursive). Each card is
mapped by :func:`ans.protocol.haidip_cards.capabilities_from_card` and
admitted on behalf of the operator's principal (``discovery:register``);
every admission and refusal is audited by the registrar, and the run as
``card_import``. A malformed card is refused alone; the others go on.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ans.protocol import jsonstrict
from ans.protocol.errors import AgtpError
from ans.protocol.haidip_cards import MAX_CARD_BYTES, capabilities_from_card
from ans.protocol.messages import Identity
from ans.protocol.scope import parse_authority_scope

from .config import Config

SOURCE = "import-cards"
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_FILES = 100_000
IMPORT_AGENT_ID = "agtp://localhost/agents/ans-import-cards"


@dataclass(frozen=True, slots=True)
class CardRefusal:
    where: str  # file, or file[index]
    status: int
    code: str
    message: str


@dataclass
class CardReport:
    imported: int = 0
    unchanged: int = 0
    refused: list[CardRefusal] = field(default_factory=list)
    ids: list[tuple[str, str]] = field(default_factory=list)  # (card id, canonical id)


def card_files(path: Path) -> list[Path]:
    """The card files ``path`` names (ValueError when there are none)."""
    if path.is_dir():
        files = sorted(p for p in path.glob("*.json") if p.is_file())
        if not files:
            raise ValueError(f"no *.json card files in {path}")
        if len(files) > MAX_FILES:
            raise ValueError(f"{len(files)} files in {path}; at most {MAX_FILES}")
        return files
    if path.is_file():
        return [path]
    raise ValueError(f"no such file or directory: {path}")


def read_cards(files: list[Path]) -> Iterator[tuple[str, Any]]:
    """(where, card or AgtpError) for every card in ``files``."""
    for f in files:
        try:
            size = f.stat().st_size
            if size > MAX_FILE_BYTES:
                raise ValueError(f"{size} bytes; at most {MAX_FILE_BYTES}")
            doc = jsonstrict.loads(f.read_bytes(), max_bytes=MAX_FILE_BYTES)
        except AgtpError as exc:
            yield str(f), exc
            continue
        except (OSError, ValueError) as exc:
            err = AgtpError(f"cannot read {f.name}: {exc}")
            yield str(f), err
            continue
        if isinstance(doc, list):
            for i, card in enumerate(doc):
                yield f"{f}[{i}]", card
        else:
            yield str(f), doc


def import_cards(
    config: Config,
    path: Path,
    *,
    zone: str | None = None,
    principal_id: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> CardReport:
    """Lock the data directory, load the registry, admit every card, write
    the index snapshot and the run's audit record."""
    from .datadir_lock import DataDirLock
    from .wiring import INDEX_DIR, build_offline_service

    files = card_files(path)
    identity = Identity(
        agent_id=IMPORT_AGENT_ID,
        principal_id=principal_id or getpass.getuser(),
        scope=parse_authority_scope("discovery:register"),
        scope_header="discovery:register",
    )
    report = CardReport()
    lock = DataDirLock.acquire(config.data_dir, "ans import-cards")
    try:
        service, _ = build_offline_service(config)
        try:
            for where, card in read_cards(files):
                try:
                    if isinstance(card, AgtpError):
                        raise card
                    caps = capabilities_from_card(card)
                    result = service.admit_self_asserted(
                        caps, source=SOURCE, identity=identity, zone=zone
                    )
                except AgtpError as exc:
                    report.refused.append(
                        CardRefusal(where, exc.status, str(exc.code), exc.message[:300])
                    )
                    if progress is not None:
                        progress(f"refused {where}: {exc.status} {exc.code}: {exc.message[:200]}")
                    continue
                if result["unchanged"]:
                    report.unchanged += 1
                else:
                    report.imported += 1
                report.ids.append((str(result["id"]), str(result["canonical_id"])))
                if progress is not None:
                    state = "unchanged" if result["unchanged"] else "imported"
                    progress(f"{state} {result['id']} ({result['canonical_id']})")
            service.save_snapshot(config.data_dir / INDEX_DIR, force=True)
            service.audit.record(
                "card_import",
                path=str(path),
                files=len(files),
                imported=report.imported,
                unchanged=report.unchanged,
                refused=len(report.refused),
                zone=zone,
                principal_id=identity.principal_id,
                max_card_bytes=MAX_CARD_BYTES,
            )
        finally:
            service.audit.close()
            service.store.close()
    finally:
        lock.release()
    return report
