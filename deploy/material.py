#!/usr/bin/env python3
"""Demo key material and signed catalogs for the deploy topology
(``deploy/topology.py`` and the ``material`` service of ``deploy/compose.yaml``).

``python deploy/material.py DIR`` writes, and keeps on later runs (nothing is
overwritten, so a re-run re-registers identical, unchanged manifests):

- ``DIR/keys/governance-key.pem`` (0600) and ``DIR/keys/governance.jwks.json``:
  a stand-in governance platform whose key signs the catalogs and the
  ACTIVATE/LIFECYCLE requests of the demo (what ``ans governance keygen``
  makes). Every ANS of the topology trusts its JWKS.
- ``DIR/keys/ans-signing-key.pem`` (0600) and ``DIR/keys/registry.jwks.json``:
  the signing key of the replicated registry. Every replica signs with it, so
  the replicas are one registry to their clients: one JWKS, one kid in
  ``federation_path``, answers that verify whichever replica gave them. The
  peer ANS has a key of its own (made in its data directory at first start).
- ``DIR/catalogs/peer.jsonl``: the peer's small catalog
  (``deploy/peer-catalog.json``), and ``DIR/catalogs/demo.jsonl``: the 64
  agents of ``ans serve --demo``; one ACTIVATE ``parameters`` object a line
  (``{"manifest", "capabilities"}``, the ``ans import`` format), signed by the
  governance key above.

The keys are demo material made on the machine that runs the topology, never
committed; a real deployment brings its governance platform's JWKS and its own
registry key (see docs/deploy.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ans.governance.keys import SigningKey
from ans.governance.signing import sign_document

from ans.demo import demo_capabilities, demo_manifest, load_catalog

PEER_CATALOG = Path(__file__).with_name("peer-catalog.json")


@dataclass(frozen=True)
class Material:
    """Where :func:`prepare` put each file."""

    root: Path
    governance_key: Path
    governance_jwks: Path
    registry_key: Path
    registry_jwks: Path
    peer_catalog: Path
    demo_catalog: Path

    @classmethod
    def at(cls, root: Path) -> Material:
        keys, cats = root / "keys", root / "catalogs"
        return cls(
            root=root,
            governance_key=keys / "governance-key.pem",
            governance_jwks=keys / "governance.jwks.json",
            registry_key=keys / "ans-signing-key.pem",
            registry_jwks=keys / "registry.jwks.json",
            peer_catalog=cats / "peer.jsonl",
            demo_catalog=cats / "demo.jsonl",
        )


def _key_pair(key_path: Path, jwks_path: Path) -> SigningKey:
    """The key at ``key_path`` (made when absent) and its public JWKS."""
    key = SigningKey.load_or_create(key_path)  # 0600, atomic
    jwks = json.dumps({"keys": [key.public.jwk()]}, indent=2) + "\n"
    if not jwks_path.exists() or jwks_path.read_text() != jwks:
        jwks_path.write_text(jwks)
    return key


def signed_lines(entries: list[dict[str, Any]], key: SigningKey) -> str:
    """One ACTIVATE ``parameters`` line per catalog entry, signed by ``key``."""
    lines = []
    for entry in entries:
        manifest = sign_document(demo_manifest(entry), key, "signature")
        lines.append(json.dumps({"manifest": manifest, "capabilities": demo_capabilities(entry)}))
    return "\n".join(lines) + "\n"


def peer_entries() -> list[dict[str, Any]]:
    agents: list[dict[str, Any]] = json.loads(PEER_CATALOG.read_text(encoding="utf-8"))["agents"]
    return agents


def _write_once(path: Path, make: Any) -> None:
    if path.exists():
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(make(), encoding="utf-8")
    os.replace(tmp, path)


def prepare(root: Path) -> Material:
    """Write (or keep) every file of :class:`Material` under ``root``."""
    m = Material.at(root)
    m.governance_key.parent.mkdir(parents=True, exist_ok=True)
    m.peer_catalog.parent.mkdir(parents=True, exist_ok=True)
    gov = _key_pair(m.governance_key, m.governance_jwks)
    _key_pair(m.registry_key, m.registry_jwks)
    _write_once(m.peer_catalog, lambda: signed_lines(peer_entries(), gov))
    _write_once(m.demo_catalog, lambda: signed_lines(load_catalog(), gov))
    return m


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="material.py",
        description="Write the deploy topology's demo keys and signed catalogs into DIR "
        "(existing files are kept).",
    )
    ap.add_argument("dir", type=Path, help="directory for keys/ and catalogs/")
    args = ap.parse_args(argv)
    try:
        m = prepare(args.dir)
    except OSError as exc:
        print(f"material.py: {exc}", file=sys.stderr)
        return 2
    gov = SigningKey.load_or_create(m.governance_key).kid
    reg = SigningKey.load_or_create(m.registry_key).kid
    print(f"governance key {m.governance_key} (kid {gov}), JWKS {m.governance_jwks}")
    print(f"registry signing key {m.registry_key} (kid {reg}), JWKS {m.registry_jwks}")
    print(f"catalogs {m.peer_catalog}, {m.demo_catalog}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
