"""Run the example commands of the README (and docs) against a real demo
server and write their real output back into the page; or, with --check,
only run them and fail when one exits otherwise than the page says.

An example is a ```console block: each ``$ `` line is a command (continued on
the next lines while it ends with a backslash or a quote is open), the lines
up to the next command are its output. A command is expected to exit 0
unless it ends with ``# exit N``. A block right after a line
``<!-- not run -->`` is left alone (one that needs a second server, say).

The commands run in a scratch directory that looks like a checkout after
``make demo``: ``.venv``, ``examples`` and ``tools`` link to this repository,
``ans-data`` is the data directory of a fresh ``ans serve --demo`` on a free
port; ``ANS_SERVER`` points at it and ``127.0.0.1:4480`` in a command is
replaced by its address (and back in the output).

    .venv/bin/python tools/readme_examples.py            # rewrite README.md outputs
    .venv/bin/python tools/readme_examples.py --check    # what the README test runs
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tools.launcher import start_server, stop_server  # noqa: E402

DEFAULT_ADDR = "127.0.0.1:4480"
NOT_RUN = "<!-- not run -->"
EXIT_RE = re.compile(r"\s+# exit (\d+)\s*$")
TIMEOUT = 120.0


@dataclass
class Example:
    command: str  # as written (continuation lines included)
    expect: int
    output: list[str]


def _complete(text: str) -> bool:
    return not text.endswith("\\") and text.count("'") % 2 == 0


def parse_block(lines: list[str]) -> list[Example]:
    out: list[Example] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            if out:
                out[-1].output.append(line)
            i += 1
            continue
        cmd = line[2:]
        i += 1
        while not _complete(cmd) and i < len(lines):
            cmd += "\n" + lines[i]
            i += 1
        m = EXIT_RE.search(cmd)
        out.append(Example(cmd, int(m.group(1)) if m else 0, []))
    return out


def blocks(text: str) -> list[tuple[int, int]]:
    """(first line, end line) of every console block to run (content lines)."""
    lines = text.split("\n")
    found = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```console" and not (i > 0 and lines[i - 1].strip() == NOT_RUN):
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            found.append((i + 1, j))
            i = j
        i += 1
    return found


def run(example: Example, cwd: Path, env: dict[str, str], addr: str) -> tuple[int, list[str]]:
    cmd = EXIT_RE.sub("", example.command).replace(DEFAULT_ADDR, addr)
    done = subprocess.run(
        ["bash", "-c", cmd],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    text = (done.stdout + done.stderr).replace(addr, DEFAULT_ADDR).rstrip("\n")
    return done.returncode, text.split("\n") if text else []


def scratch(tmp: Path, data: Path) -> Path:
    work = tmp / "work"
    work.mkdir()
    for name in (".venv", "examples", "tools"):
        (work / name).symlink_to(ROOT / name)
    (work / "ans-data").symlink_to(data)
    return work


def process(path: Path, check: bool, work: Path, env: dict[str, str], addr: str) -> list[str]:
    """Run the examples of ``path``; rewrite it unless ``check``. Failures."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    failures: list[str] = []
    for start, end in reversed(blocks(text)):
        examples = parse_block(lines[start:end])
        new: list[str] = []
        for ex in examples:
            status, output = run(ex, work, env, addr)
            if status != ex.expect:
                failures.append(
                    f"{path.name}: `{ex.command.splitlines()[0][:80]}` exited {status}, "
                    f"expected {ex.expect}: {' / '.join(output[-3:])[:300]}"
                )
            new += ["$ " + ex.command.split("\n")[0], *ex.command.split("\n")[1:], *output]
        if not check:
            lines[start:end] = new
    if not check:
        path.write_text("\n".join(lines), encoding="utf-8")
    return failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, default=[ROOT / "README.md"])
    ap.add_argument("--check", action="store_true", help="run only; exit 1 on a failure")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ans-readme-") as tmp_name:
        tmp = Path(tmp_name)
        data = tmp / "ans-data"
        cfg = tmp / "ans.toml"
        cfg.write_text("[rate_limit]\nenabled = false\n", encoding="utf-8")
        server = start_server(data, "--demo", "--config", str(cfg))
        try:
            addr = server.url.split("://", 1)[1]
            env = {**os.environ, "ANS_SERVER": server.url, "COLUMNS": "120"}
            work = scratch(tmp, data)
            failures: list[str] = []
            for path in args.files:
                failures += process(path.resolve(), args.check, work, env, addr)
        finally:
            stop_server(server)
    for f in failures:
        print(f, file=sys.stderr)
    print(f"{len(failures)} failing example(s)" if failures else "every example ran as written")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
