"""The README's pictures are what kvscope draws today: docs/pictures.py re-runs each one's command on the
bundled examples and compares the SHA-256 of what it printed with the one the picture was drawn from."""

from __future__ import annotations

import importlib.util
import struct
import sys

from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def _pictures():
    spec = importlib.util.spec_from_file_location("pictures", REPO / "docs" / "pictures.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def test_no_picture_is_stale():
    stale = _pictures().stale()
    assert not stale, f"re-draw them: python docs/pictures.py ({', '.join(stale)})"


def test_every_picture_is_shown_and_every_screenshot_is_a_real_png():
    pictures = _pictures()
    for pic in pictures.PICTURES:
        assert f"docs/images/{pic.file}" in README, pic.file
        if pic.file.endswith(".svg"):
            assert (pictures.IMAGES / pic.file).read_text().lstrip().startswith("<svg")
        else:
            data = (pictures.IMAGES / pic.file).read_bytes()
            assert data[:8] == b"\x89PNG\r\n\x1a\n"
            width, height = struct.unpack(">II", data[16:24])
            assert width >= 800 and height >= 800 and len(data) > 50_000  # a page with charts, not a blank frame
