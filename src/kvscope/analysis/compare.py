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


# device totals within this of each other are the same kind of device (rounding of the two logs' figures)
SAME_DEVICE_GIB = 0.5
# what ran short, as the engines name it before the contract's kinds are applied
_SHORT_OF_MEMORY = frozenset({"not-enough-memory", "cuda-oom"})


def _total(s: Startup) -> float | None:
    ref = s.reference_rank
    return ref.total_gib if ref is not None else None


def held_gib(s: Startup) -> tuple[float | None, str]:
    """What a running startup holds on its device, and how that is known: total − free at ready when both are
    printed, else weights + KV pools + CUDA graphs (a lower bound: the context and activations are not in it)."""
    ref = s.reference_rank
    if ref is None:
        return None, ""
    if ref.total_gib and ref.avail_at_ready_gib is not None:
        return ref.total_gib - ref.avail_at_ready_gib, "its total less its free memory at ready"
    kv = sum(p.gib or 0.0 for p in ref.kv_pools) or s.capacity.available_kv_gib
    parts = [(name, x) for name, x in (("weights", ref.weights_gib), ("KV cache", kv), ("CUDA graphs", ref.cuda_graph_gib))
             if x]
    if not parts:
        return None, ""
    return sum(x for _, x in parts), "at least: its " + " + ".join(name for name, _ in parts)


def infer_contention(prev: Startup, cur: Startup, index: int) -> None:
    """Two instances pasted together: ``cur`` (startup ``index``) ran short of memory while ``prev``, earlier in
    the same file on a device of the same size, had sized its KV cache and shows no failure, so it was still
    holding its memory. That is the contract's multi-instance-contention, whatever wording ``cur`` failed with;
    the engine's findings then say so, and more memory for ``cur`` is never the advice."""
    f = cur.failure
    if f is None or f.kind not in _SHORT_OF_MEMORY or prev.failure is not None or prev.engine != cur.engine:
        return
    if not prev.file or prev.file != cur.file:  # two files can be two machines
        return
    if not (prev.capacity.kv_tokens or prev.capacity.num_gpu_blocks or (prev.capacity.available_kv_gib or 0) > 0):
        return
    a, b = _total(prev), _total(cur)
    if a is not None and b is not None and abs(a - b) > SAME_DEVICE_GIB:
        return
    held, how = held_gib(prev)
    f.data.setdefault("read_as", f.kind)
    f.data.update(held_by_startup=index - 1, held_gib=round(held, 2) if held is not None else None, held_how=how)
    f.kind = "multi-instance-contention"


def compare_startups(startups: list[Startup]) -> None:
    """Give each startup that follows a comparable one the finding that says what changed."""
    for i in range(1, len(startups)):
        f = compare(startups[i - 1], startups[i], i + 1)
        if f is not None:
            startups[i].findings.append(f)
