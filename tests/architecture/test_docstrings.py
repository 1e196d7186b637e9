"""Module docstrings point only at files inside the repository: a reader of an installed package or a fresh
clone has no ../shared folder, so a reference there is a dead link."""

from __future__ import annotations

import ast
import re

from tests.conftest import REPO

_PATH = re.compile(r"(?<![\w/.])((?:docs|src|tests|benchmarks)/[\w./-]+\.(?:md|json|py))")


def test_module_docstrings_name_no_file_outside_the_repository():
    outside, missing = [], []
    for path in sorted((REPO / "src" / "kvscope").rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        rel = path.relative_to(REPO)
        if "../shared" in doc or "/work/" in doc:
            outside.append(str(rel))
        missing += [f"{rel}: {p}" for p in _PATH.findall(doc) if not (REPO / p).exists()]
    assert outside == [], outside
    assert missing == [], missing
