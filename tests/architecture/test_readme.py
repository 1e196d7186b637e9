"""The README stays a user guide: under 200 lines, a Quick start of exactly two commands (install and run the
bundled example; run the tests), and every file it links exists."""

from __future__ import annotations

import re

from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_short_enough_to_be_read():
    assert len(README.splitlines()) < 200


def test_the_quick_start_is_two_commands():
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None
    commands = [line for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert len(commands) == 2
    assert "kvscope explain --example" in commands[0] and "pytest" in commands[1]


def test_every_linked_file_exists():
    for target in re.findall(r"\]\(([^)#\s]+)\)", README):
        if "://" not in target:
            assert (REPO / target).exists(), target
