"""Renderers: the same analysis as terminal text, JSON, markdown or self-contained HTML.

Redaction happens here, once, on the finished text/document, so every format is covered.
"""

from __future__ import annotations

import importlib
from typing import Any

from kvscope.errors import InputError

MODULES = {"terminal": "terminal", "json": "json_out", "markdown": "markdown", "html": "html"}


def render_analysis(analysis: Any, fmt: str, redact: bool = True, extra: dict[str, Any] | None = None) -> str:
    try:
        module = importlib.import_module(f"kvscope.render.{MODULES[fmt]}")
    except (KeyError, ModuleNotFoundError):
        raise InputError(f"output format {fmt!r} is not available in this build") from None
    text = module.render(analysis, extra) if extra is not None else module.render(analysis)
    if redact:
        try:
            from kvscope.render.redact import redact_text
        except ModuleNotFoundError:
            return text
        text = redact_text(text, fmt)
    return text
