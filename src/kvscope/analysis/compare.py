"""Two startups of one input, compared: what changed between them, and what it did to capacity.

Operators paste the run that worked next to the one that did not, or a run before and after a flag change.
When two consecutive startups are of the same engine and both sized a KV cache, the later one gets a finding
that names the settings that differ (those its engine's rules read) and the capacity they moved, so the
cause of a different pool is one line, not two ledgers to compare by eye.
"""

from __future__ import annotations

from typing import Any

from kvscope import engines
from kvscope.core.startup import Finding, Startup

# free memory before weights that moved by more than this between two runs on the same GPUs is worth naming
FREE_MEMORY_MOVED_GIB = 1.0


def _changed(prev: Startup, cur: Startup) -> list[tuple[str, Any, Any]]:
    keys = engines.get(cur.engine).settings
    out = []
    for key in sorted(keys):
        a, b = prev.settings.get(key), cur.settings.get(key)
        if a is not None and b is not None and a != b and not isinstance(a, (dict, list)):
            out.append((key, a, b))
    return out


def _free_before(s: Startup) -> float | None:
    ref = s.reference_rank
    return ref.pre_load_free_gib if ref is not None else None


def compare(prev: Startup, cur: Startup, index: int) -> Finding | None:
    """The finding for ``cur`` (startup ``index``, 1-based, follows ``prev``), or None when they are not comparable."""
    if prev.engine != cur.engine or not prev.capacity.kv_tokens or not cur.capacity.kv_tokens:
        return None
    before, after = prev.capacity.kv_tokens, cur.capacity.kv_tokens
    changed = _changed(prev, cur)
    parts = [f"{key} {a} → {b}" for key, a, b in changed]
    free_a, free_b = _free_before(prev), _free_before(cur)
    if free_a is not None and free_b is not None and abs(free_a - free_b) >= FREE_MEMORY_MOVED_GIB:
        parts.append(f"free memory before weights {free_a:.2f} → {free_b:.2f} GiB")
    if not parts and before == after:
        return None
    delta = after - before
    moved = (f"KV capacity {before:,} → {after:,} tokens ({delta:+,}, {delta / before:+.1%})" if delta else
             f"KV capacity unchanged at {after:,} tokens")
    what = "; ".join(parts) if parts else "no setting the log shows"
    detail = f"Compared with startup {index - 1} of this input: {what}. {moved}."
    if not parts and delta:
        detail += (" The settings the log shows are the same, so the difference is in what it does not show "
                   "(free memory at start, the release, the flags not printed).")
    return Finding("compared-with-previous", "info", f"Since startup {index - 1}: {moved}", detail, context=True)


def compare_startups(startups: list[Startup]) -> None:
    """Give each startup that follows a comparable one the finding that says what changed."""
    for i in range(1, len(startups)):
        f = compare(startups[i - 1], startups[i], i + 1)
        if f is not None:
            startups[i].findings.append(f)
