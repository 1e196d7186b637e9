"""Engine-neutral findings: numbers that cannot be true, and ranks that disagree."""

from __future__ import annotations

from kvscope import engines
from kvscope.core.startup import Finding, Startup

IMBALANCE_GIB = 1.0  # a spread this large in free memory between ranks is worth a look


def _inconsistencies(s: Startup) -> list[str]:
    problems: list[str] = []
    total = s.assumptions.get("gpu_total_gib")
    for r in s.ranks:
        for key in ("pre_load_free_gib", "avail_after_weights_gib", "avail_after_pool_gib", "avail_at_ready_gib",
                    "weights_gib", "total_gib"):
            value = getattr(r, key)
            if value is not None and value < 0:
                problems.append(f"{r.rank}: {key} is negative ({value})")
        for row in r.ledger:  # free memory kvscope worked out from the log's figures: below zero, they disagree
            if row.how != "read" and row.gib is not None and row.gib < -0.01 and "free" in row.item.lower():
                problems.append(f"{r.rank}: the ledger's {row.item!r} comes out at {row.gib:.2f} GiB (figures of "
                                "different runs or ranks pasted together?)")
        for pool in r.kv_pools:
            size = pool.size_gib()
            if size is not None and size < 0:
                problems.append(f"{r.rank}: pool {pool.name} has a negative size ({size})")
            if pool.tokens is not None and pool.tokens < 0:
                problems.append(f"{r.rank}: pool {pool.name} has a negative token count")
            limit = r.total_gib or total or r.pre_load_free_gib
            if size and limit and pool.name not in ("host",) and size > limit * 1.01:
                problems.append(f"{r.rank}: the {pool.name} KV pool ({size:.2f} GiB) is larger than the GPU ({limit:.2f} GiB)")
        if (r.pre_load_free_gib and r.weights_gib and r.avail_after_weights_gib
                and "pre_load_free_gib" not in r.derived and "avail_after_weights_gib" not in r.derived
                and abs(r.pre_load_free_gib - r.weights_gib - r.avail_after_weights_gib) > 2.0):
            problems.append(
                f"{r.rank}: free before weights {r.pre_load_free_gib:.2f} − weights {r.weights_gib:.2f} "
                f"≠ free after weights {r.avail_after_weights_gib:.2f}"
            )
    tokens = {p.tokens for r in s.ranks for p in r.kv_pools if p.name == "target" and p.tokens is not None}
    if len(tokens) > 1 and engines.get(s.engine).knobs.ranks_share_one_pool_size and not s.setting("enable_dp_attention") and s.setting("pp_size", 1) in (1, None):
        problems.append(f"ranks report different target token counts ({', '.join(f'{t:,}' for t in sorted(tokens))})")
    return problems


def _imbalance(s: Startup) -> Finding | None:
    for key, label in (("pre_load_free_gib", "free memory before weights"), ("avail_after_weights_gib", "free memory after weights")):
        values = {r.rank: getattr(r, key) for r in s.ranks if getattr(r, key) is not None and key not in r.derived}
        if len(values) < 2:
            continue
        lo_rank = min(values, key=values.__getitem__)
        hi_rank = max(values, key=values.__getitem__)
        spread = values[hi_rank] - values[lo_rank]
        if spread >= IMBALANCE_GIB:
            return Finding(
                "rank-imbalance", "warning", f"Ranks differ by {spread:.2f} GiB in {label}",
                f"{lo_rank} had {values[lo_rank]:.2f} GiB, {hi_rank} {values[hi_rank]:.2f} GiB. The engine sizes the "
                f"KV pool from the minimum over ranks, so every rank loses what the poorest one lacks — often another "
                f"process on that GPU (check nvidia-smi on {lo_rank}'s device).",
            )
    for w in s.warnings:
        if w.get("code") == "rank-imbalance":
            return Finding("rank-imbalance", "warning", "The engine warned that GPU memory is unbalanced across ranks",
                           f"min {w.get('min_gib')} GiB vs local {w.get('local_gib')} GiB: another process is probably "
                           "using one of the GPUs; the KV pool is sized from the minimum.")
    return None


def findings(s: Startup) -> list[Finding]:
    out: list[Finding] = []
    problems = _inconsistencies(s)
    if problems:
        out.append(Finding("log-inconsistent", "warning", "The log is inconsistent",
                           "These figures cannot all be true, so conclusions drawn from them are shaky: " + "; ".join(problems[:6])))
    imbalance = _imbalance(s)
    if imbalance:
        out.append(imbalance)
    return out
