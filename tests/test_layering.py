"""Imports point one way: protocol <- governance <- federation <- ans (DESIGN.md).

Every module of the four packages is parsed (not imported) and each import,
absolute or relative, at any depth (inside functions and TYPE_CHECKING blocks
too), is resolved to the package it names. A module may import its own
package and the ones below it, never one above."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# folder -> its import name, lowest layer first
LAYERS = {
    "protocol": "ans.protocol",
    "governance": "ans.governance",
    "federation": "ans.federation",
    "ans": "ans",
}
RANK = {name: i for i, name in enumerate(LAYERS.values())}


def layer_of(module: str) -> str | None:
    """The project package an absolute module name belongs to (None: not ours)."""
    for name in ("ans.protocol", "ans.governance", "ans.federation"):
        if module == name or module.startswith(name + "."):
            return name
    if module == "ans" or module.startswith("ans."):
        return "ans"
    return None


def imports_of(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            # "from . import x" may name a submodule: resolve each name too
            if not node.module:
                out += [(node.lineno, f"{mod}.{alias.name}") for alias in node.names]
    return out


def modules() -> list[tuple[Path, str]]:
    found = []
    for folder, package in LAYERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            pkg = (
                ".".join([package, *parts[:-1]])
                if path.name != "__init__.py"
                else ".".join([package, *parts])
            )
            found.append((path, pkg))
    return found


def test_the_four_packages_are_found() -> None:
    folders = {p.relative_to(ROOT).parts[0] for p, _ in modules()}
    assert folders == set(LAYERS)


@pytest.mark.parametrize(("path", "package"), modules(), ids=lambda v: str(v))
def test_imports_point_down(path: Path, package: str) -> None:
    own = RANK[layer_of(package) or "ans"]
    upward = [
        f"{path.relative_to(ROOT)}:{line} imports {mod}"
        for line, mod in imports_of(path, package)
        if (layer := layer_of(mod)) is not None and RANK[layer] > own
    ]
    assert not upward, "imports against protocol <- governance <- federation <- ans:\n" + "\n".join(
        upward
    )


def test_an_upward_import_is_caught(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from ans.federation.peers import Peer\nfrom ..federation import x\n")
    found = [layer_of(m) for _, m in imports_of(bad, "ans.governance")]
    assert found.count("ans.federation") == 2
