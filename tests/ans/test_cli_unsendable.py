"""CLI arguments that JSON cannot carry are refused in one line, before any
request is sent (the server named is never reached: port 9, discard)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ans.cli import main

DEAD = "http://127.0.0.1:9"


@pytest.mark.parametrize("value", ["nan", "inf", "-Infinity", "1e400", "x"])
def test_a_trust_floor_that_is_not_a_finite_number_is_a_usage_error(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["discover", "audit contracts", "--server", DEAD, f"--behavioral-trust-min={value}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--behavioral-trust-min" in err and "number" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["discover", "audit contracts", "--limit", str(2**80)],
        ["discover", "audit \udca0 contracts"],  # a lone surrogate (an undecodable argv byte)
    ],
)
def test_discover_parameters_json_cannot_carry_fail_in_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--server", DEAD]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ans: DISCOVER parameters cannot be sent as JSON")
    assert err.count("\n") == 1


def test_activate_of_a_document_json_cannot_carry_fails_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "m.json"
    doc.write_text(json.dumps({"manifest": {"x": 2**64}}))
    assert main(["activate", str(doc), "--server", DEAD]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ans: ACTIVATE parameters cannot be sent as JSON")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("flag", "value"), [("--principal-id", "ops\nteam"), ("--agent-id", "agtp://x/\u00e9")]
)
def test_an_identity_no_header_can_carry_fails_in_one_line(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["discover", "audit contracts", "--server", DEAD, flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ans: {flag[2:]} must be at most 512 printable ASCII characters")
    assert err.count("\n") == 1
