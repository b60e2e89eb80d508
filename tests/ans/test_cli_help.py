"""Every command's --help: every option explained (with its default), examples."""

from __future__ import annotations

import argparse

import pytest

from ans import __version__
from ans.cli import main
from ans.cli.parser import _EXAMPLES, _parser, _subparsers


def commands() -> list[tuple[str, argparse.ArgumentParser]]:
    return _subparsers(_parser())


def test_every_option_of_every_command_has_help() -> None:
    missing = [
        (path, action.dest)
        for path, sub in commands()
        for action in sub._actions
        if action.dest != "help"
        and not isinstance(action, argparse._SubParsersAction)
        and not (action.help or "").strip()
    ]
    assert missing == []


@pytest.mark.parametrize("path", [p for p, _ in commands()])
def test_help_runs_and_shows_defaults_and_examples(
    path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main([*path.split(), "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    if path in _EXAMPLES:
        assert "examples:" in out and _EXAMPLES[path][0].split()[1] in out
    if path == "discover":
        assert "(default: 10.0)" in out  # --timeout's default is shown


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"ans {__version__}"
