"""Renderers: the same analysis as terminal text, JSON, markdown, self-contained HTML or Prometheus text.

Redaction happens here, once, for every format: on the *document* before rendering (so JSON
stays valid and HTML escaping is never undone), then on the finished text of the plain-text
formats as a second net. See core/redact.py for what is hidden and why.
"""

from __future__ import annotations

import importlib
from typing import Any

from kvscope.core.errors import InputError

MODULES = {"terminal": "terminal", "json": "json_out", "markdown": "markdown", "html": "html", "prometheus": "prometheus"}
TEXT_PASS = ("terminal", "markdown")  # formats whose finished text holds no code or escaping to protect


def render_analysis(analysis: Any, fmt: str, redact: bool = True, extra: dict[str, Any] | None = None) -> str:
    try:
        module = importlib.import_module(f"kvscope.render.{MODULES[fmt]}")
    except (KeyError, ModuleNotFoundError):
        raise InputError(f"output format {fmt!r} is not available in this build") from None
    redact_text = None
    if redact:
        from kvscope.core.redact import redact_text, redact_value

        analysis = redact_value(analysis)
        extra = redact_value(extra) if extra is not None else None
    text = module.render(analysis, extra) if extra is not None else module.render(analysis)
    if redact_text is not None and fmt in TEXT_PASS:
        text = redact_text(text, fmt)
    return text
