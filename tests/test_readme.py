"""The README is the newcomer's page: short, every link inside the repository,
and every example command on it (and in docs/) runs as written against a real
demo server (tools/readme_examples.py --check)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_bytes()) < 15 * 1024


def test_every_link_stays_inside_the_repository() -> None:
    bad = []
    for page in PAGES:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if target.startswith(("#", "http://", "https://")):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.is_relative_to(ROOT) or not path.exists():
                bad.append(f"{page.name}: {target}")
    assert bad == []


def test_every_example_command_runs_as_written() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "readme_examples.py"), "--check", *map(str, PAGES)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr + done.stdout
