"""Release numbers as the engines print them, read one way: '0.24.0', 'v0.8.3.dev172+g2b93162f', '0.16.0'."""

from __future__ import annotations

import re

Version = tuple[int, int, int]


def parse_version(text: str | None) -> Version | None:
    """'0.24.0', 'v0.8.3.dev172+g2b93162f' → (0, 24, 0) / (0, 8, 3); None when it does not start with a number."""
    if not text:
        return None
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
