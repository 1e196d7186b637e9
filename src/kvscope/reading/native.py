"""Whether kvscope's C helpers (``kvscope._bulk``) are used: one switch for every caller.

The extension is optional: ``pip install`` builds it where a C compiler exists and installs the
pure-Python package otherwise, and ``KVSCOPE_PURE_PYTHON=1`` turns it off (to compare the two
paths, or to rule the C code out while chasing a bug). Every C helper has a Python twin that gives
the same result; tests hold the two to it.
"""

from __future__ import annotations

import os
from typing import Any


def _native() -> Any:
    """``kvscope._bulk`` (anchor scan, newline count, the engines' bulk lane), or None where it was
    not built or ``KVSCOPE_PURE_PYTHON`` turns it off."""
    if os.environ.get("KVSCOPE_PURE_PYTHON"):
        return None
    try:
        from kvscope import _bulk  # the optional C helper (see OPTIONAL in the test)
    except ImportError:
        return None
    return _bulk


NATIVE = _native()
