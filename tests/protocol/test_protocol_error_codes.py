"""ErrorCode is the one list of AGTP error codes (issue 24 item 8).

Three things keep it so: the table "Error codes" in docs/wire-contract.md lists exactly the
enum's values (both ways, each under its class's status); no product module
passes a string literal as an error ``code`` or sets a class ``code`` to one;
and a member is on the wire exactly its value (orjson, json, JCS).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import get_args

import orjson
import pytest
from ans.protocol.errors import (
    ERROR_CODES,
    INVALID_HEADER_CODES,
    PARAMETER_CODES,
    REQUIRED_HEADER_CODES,
    AgtpError,
    ErrorCode,
    InvalidParameter,
    Parameter,
    SignatureInvalid,
)
from ans.protocol.jcs import canonicalize, canonicalize_reference

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("ans", "governance", "federation", "protocol")
CODE_RE = re.compile(r"`([a-z][a-z0-9_]*)`")


def _readme_table() -> dict[int, set[str]]:
    """{status: codes} from the README section "Error codes": the backticked
    names in each row, except in notes (in parentheses)."""
    text = (ROOT / "docs" / "wire-contract.md").read_text(encoding="utf-8")
    section = text.split("### Error codes\n", 1)[1]
    rows: dict[int, set[str]] = {}
    for line in section.splitlines():
        m = re.fullmatch(r"\| (\d{3}) \| (.*) \|", line)
        if m:
            codes = re.sub(r"\([^()]*\)", "", m.group(2))  # notes in parentheses
            rows[int(m.group(1))] = set(CODE_RE.findall(codes))
        elif rows and not line.startswith("|"):
            break  # the end of the table
    return rows


def _all_subclasses(cls: type[AgtpError]) -> list[type[AgtpError]]:
    out, stack = [], [cls]
    while stack:
        c = stack.pop()
        out.append(c)
        stack.extend(c.__subclasses__())
    return out


def test_readme_lists_exactly_the_enum() -> None:
    listed = set().union(*_readme_table().values())
    codes = {c.value for c in ErrorCode}
    assert not listed - codes, (
        f"README lists codes that are not ErrorCode members: {sorted(listed - codes)}"
    )
    assert not codes - listed, (
        f"ErrorCode members missing from the README table: {sorted(codes - listed)}"
    )


def test_readme_row_of_each_code_is_its_status() -> None:
    rows = _readme_table()
    for cls in _all_subclasses(AgtpError):
        assert cls.code in rows[cls.status], (
            f"{cls.__name__}: {cls.code} not in README row {cls.status}"
        )
    for code in PARAMETER_CODES.values():
        assert code in rows[InvalidParameter.status], code
    for code in [*REQUIRED_HEADER_CODES.values(), *INVALID_HEADER_CODES.values()]:
        assert code in rows[400], code


def test_registry_and_mappings_are_the_enum() -> None:
    assert {c.value for c in ErrorCode} == ERROR_CODES
    assert all(type(c) is str for c in ERROR_CODES)
    assert set(PARAMETER_CODES) == set(get_args(Parameter))
    for name, code in PARAMETER_CODES.items():
        assert code == f"invalid_{name}"  # the wire codes the f-string used to build
        assert InvalidParameter(name, "x").code is code
    for mapping in (REQUIRED_HEADER_CODES, INVALID_HEADER_CODES):
        assert all(isinstance(code, ErrorCode) for code in mapping.values())
    for cls in _all_subclasses(AgtpError):
        assert isinstance(cls.code, ErrorCode), cls


@pytest.mark.parametrize("code", list(ErrorCode))
def test_member_is_its_value_on_the_wire(code: ErrorCode) -> None:
    plain = code.value
    assert type(plain) is str and str(code) == plain and f"{code}" == plain
    assert type(str(code)) is str
    for doc in ({"code": code}, [code], code):
        as_plain = (
            {"code": plain}
            if isinstance(doc, dict)
            else [plain]
            if isinstance(doc, list)
            else plain
        )
        assert orjson.dumps(doc) == orjson.dumps(as_plain)
        assert orjson.dumps(doc, option=orjson.OPT_SORT_KEYS) == orjson.dumps(as_plain)
        assert json.dumps(doc) == json.dumps(as_plain)
        assert canonicalize(doc) == canonicalize(as_plain) == canonicalize_reference(doc)


def test_member_as_a_dict_key_needs_str() -> None:
    """orjson takes a member as a value but not as a key: the reason every code
    that becomes a key (e.g. the import report's tally) is str() first."""
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps({ErrorCode.RATE_LIMITED: 1})
    assert orjson.dumps({str(ErrorCode.RATE_LIMITED): 1}) == b'{"rate_limited":1}'


def test_error_object_carries_a_plain_str() -> None:
    exc = SignatureInvalid(
        "the signed refusal is for another task_id", code=ErrorCode.REFUSAL_MISMATCH
    )
    obj = exc.to_error_object()
    assert obj == {"code": "refusal_mismatch", "message": exc.message}
    assert type(obj["code"]) is str


# -- no string literal codes in the product code ----------------------------------------


def _modules() -> list[tuple[Path, ast.Module]]:
    out = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            out.append((path, ast.parse(path.read_text(encoding="utf-8"), str(path))))
    return out


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _error_class_names(modules: list[tuple[Path, ast.Module]]) -> set[str]:
    """AgtpError and every class (by name) deriving from it in the product code."""
    names = {"AgtpError"}
    classes = [n for _, tree in modules for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    grown = True
    while grown:
        grown = False
        for cls in classes:
            if cls.name not in names and any(_name(b) in names for b in cls.bases):
                names.add(cls.name)
                grown = True
    return names


def _is_literal(node: ast.expr) -> bool:
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)) or isinstance(
        node, ast.JoinedStr
    )


def _literal_codes(modules: list[tuple[Path, ast.Module]]) -> list[str]:
    """Where a string literal is an error code: ``code="..."`` passed to an
    error class, any known code passed as ``code=`` (audit records, helpers),
    or an error class body setting ``code`` to a literal."""
    errors = _error_class_names(modules)
    found: list[str] = []
    for path, tree in modules:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                to_error = _name(node.func) in errors
                for kw in node.keywords:
                    if kw.arg != "code" or not _is_literal(kw.value):
                        continue
                    value = kw.value.value if isinstance(kw.value, ast.Constant) else None
                    if to_error or value in ERROR_CODES:
                        found.append(f"{path}:{node.lineno}: code={ast.unparse(kw.value)}")
            elif isinstance(node, ast.ClassDef) and node.name in errors:
                for stmt in node.body:
                    if isinstance(stmt, ast.Assign):
                        targets, value = stmt.targets, stmt.value
                    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                        targets, value = [stmt.target], stmt.value
                    else:
                        continue
                    if any(_name(t) == "code" for t in targets) and _is_literal(value):
                        found.append(f"{path}:{stmt.lineno}: class {node.name} code literal")
    return found


def test_no_string_literal_error_codes() -> None:
    modules = _modules()
    # the scan knows every error class there is
    assert {c.__name__ for c in _all_subclasses(AgtpError)} <= _error_class_names(modules)
    found = _literal_codes(modules)
    assert not found, "error codes as string literals (use ErrorCode):\n" + "\n".join(found)


def test_the_scan_catches_literals() -> None:
    """A check of the check: each kind of literal code is flagged."""
    source = (
        "class Custom(BadRequest):\n    code = 'custom'\n"
        "class Typed(Custom):\n    code: ClassVar[str] = f'x_{y}'\n"
        "raise Custom('m', code='anything')\n"
        "raise Typed('m', code=f'invalid_{name}')\n"
        "audit.record('x', code='rate_limited')\n"
        "audit.record('x', code='peer_timeout')\n"  # not an error code: not flagged
        "raise Custom('m', code=ErrorCode.INVALID_LIMIT)\n"
    )
    modules = [(Path("synthetic.py"), ast.parse(source)), *_modules()]
    found = [f for f in _literal_codes(modules) if f.startswith("synthetic.py")]
    assert [f.split(":")[1] for f in found] == ["2", "4", "5", "6", "7"], found
