"""``whatif`` for vLLM: calibrate on the logged block count, then move one budget term at a time.

vLLM's KV memory is K = T × util − (non-KV terms), and none of the non-KV terms depend on util, so
K' = K + Δutil × T exactly (vllm-memory.md §7). The logged block count B pins K to
[B·P, (B+1)·P) where P is the bytes of one block across the worker's layers; predictions inherit
only the ±0.005 GiB of the printed device total times Δutil.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kvscope.core.errors import InputError
from kvscope.core.startup import Startup, finite_number
from kvscope.core.versions import parse_version
from kvscope.engines.vllm import finish as vfinish
from kvscope.engines.vllm import plan as vplan
from kvscope.engines.vllm import rules as vrules
from kvscope.engines.vllm.facts import VllmCapacityFacts, VllmRankFacts
from kvscope.engines.vllm.plan_spec import VllmDraft, resolve_vllm_draft, spec_request
from kvscope.engines.whatif_base import (
    PredictionError,
    Scenario,
    _risk,
    _truthy,
    assemble_prediction,
    normalise_changes,
)
from kvscope.model.arch import dtype_bytes
from kvscope.model.weights import ModelConfig, Parallel, load_model_config, weights_delta_gib

GIB = 1 << 30
SUPPORTED = {"gpu_memory_utilization", "kv_cache_dtype", "max_model_len", "block_size", "kv_cache_memory_bytes",
             "kv_offloading_size", "tensor_parallel_size", "max_num_seqs", "max_num_batched_tokens", "enforce_eager",
             "speculative_config"}
ALIASES = {"util": "gpu_memory_utilization", "context_length": "max_model_len", "max_len": "max_model_len",
           "tp_size": "tensor_parallel_size", "tp": "tensor_parallel_size", "kv_cache_memory": "kv_cache_memory_bytes",
           "mem_fraction_static": "gpu_memory_utilization"}
FLAGS = {"gpu_memory_utilization": "--gpu-memory-utilization", "kv_cache_dtype": "--kv-cache-dtype",
         "max_model_len": "--max-model-len", "block_size": "--block-size", "kv_cache_memory_bytes": "--kv-cache-memory-bytes",
         "kv_offloading_size": "--kv-offloading-size", "tensor_parallel_size": "--tensor-parallel-size",
         "max_num_seqs": "--max-num-seqs", "max_num_batched_tokens": "--max-num-batched-tokens",
         "enforce_eager": "--enforce-eager", "speculative_config": "--speculative-config"}


@dataclass(frozen=True)
class ProfileShape:
    """What the logged profile run was: its batch limits and the model's shape, so that a change of
    max_num_batched_tokens / max_num_seqs moves the logged activation peak by what plan's model says it moves
    (the calibrated figure keeps what the model does not capture, such as torch.compile's buffers)."""

    cfg: dict[str, Any]
    tp: int
    batched_tokens: int
    num_seqs: int
    rule: vplan.SamplerRule
    from_defaults: tuple[str, ...]  # which of the two were the release's defaults, not logged

    def peak_gib(self, tokens: int, seqs: int, draft: VllmDraft | None) -> tuple[float, float | None]:
        """(the profile's activation peak, the drafter's share or None where unmodelled) at these batch limits."""
        return vplan.vllm_activation_with_draft_gib(self.cfg, self.tp, tokens, seqs, self.rule, draft)


@dataclass
class VllmCalibration:
    """What the logged run pins down: blocks, bytes per block, K's range, and the settings it ran with."""

    blocks: int
    block_size: int
    block_bytes: float  # bytes of one block id across the worker's KV layers
    kv_low_bytes: float
    kv_high_bytes: float
    util: float | None
    total_gib: float | None
    max_model_len: int | None
    kv_bytes: int
    tp: int
    capacity_rule: str
    free_at_ready_gib: float | None
    notes: list[str] = field(default_factory=list)
    mamba: vrules.MambaLayout | None = None  # hybrid attention + Mamba: the layout that reproduced the log
    model: str | None = None  # the model id or path, to estimate how its weights shard
    arch: Any = None  # its architecture, for the KV heads per GPU at another TP
    pp: int = 1  # pipeline stages: weights per GPU are one stage's
    failed: bool = False  # calibrated on a startup that stopped before printing its blocks
    # V0 without chunked prefill batches max(max_model_len, 2048) tokens in its profile run, so the logged
    # activation peak scales with max_model_len (vLLM 0.6 SchedulerConfig: max_num_batched_tokens defaults to
    # max(max_model_len, 2048) when chunked prefill is off; V0 turns it on by default only above 32K)
    activation_gib: float | None = None
    batched_tokens_follow_max_len: bool = False
    weights_gib: float | None = None  # what the log shows of the budget, to bound an unlogged device total
    non_torch_gib: float | None = None
    # the profile run's shape (V1 engine), to move its activation peak when the batch limits change
    profile: ProfileShape | None = None
    graphs_inside: bool | None = None  # the release subtracted its CUDA-graph estimate from the budget
    graph_estimate_gib: float | None = None
    eager: bool = False
    # the drafter the logged run had (None: none), and what pricing another one needs: the target's config and
    # whether the weights were dummy (a dummy-loaded EAGLE head shares the target's lm_head, plan_spec)
    draft: VllmDraft | None = None
    model_config: ModelConfig | None = None
    load_format: str | None = None

    @property
    def kv_tokens(self) -> int:
        """The logged capacity: blocks × block_size, or a hybrid's concurrency × max_model_len."""
        if self.mamba is not None and self.max_model_len:
            return vrules.mamba_capacity_of_blocks(self.blocks, self.mamba, self.max_model_len, self.capacity_rule).tokens
        return self.blocks * self.block_size

    @property
    def bytes_per_token(self) -> float:
        """KV bytes per logged token (a hybrid's state pages spread over its tokens)."""
        if self.mamba is not None and self.kv_tokens:
            return self.blocks * self.block_bytes / self.kv_tokens
        return self.block_bytes / self.block_size

    def as_dict(self) -> dict[str, Any]:
        return {"num_gpu_blocks": self.blocks, "block_size": self.block_size, "block_bytes": round(self.block_bytes),
                "bytes_per_token": round(self.bytes_per_token), "kv_tokens": self.kv_tokens,
                "available_kv_gib_low": round(self.kv_low_bytes / GIB, 4), "available_kv_gib_high": round(self.kv_high_bytes / GIB, 4),
                "gpu_memory_utilization": self.util, "total_gib": self.total_gib, "max_model_len": self.max_model_len,
                "tp_size": self.tp, "failed_startup": self.failed, "notes": self.notes}


def calibrate(s: Startup) -> VllmCalibration:
    """Pin K from the logged blocks (or tokens) and the block bytes of the reconciled layout."""
    cap = s.capacity
    bs = vfinish.block_size(s)
    arch, _ = vfinish.arch_context(s)
    mamba = _mamba_layout(s, arch)
    if mamba is not None:
        bs = mamba.block_size
    blocks = cap.num_gpu_blocks or _logged_blocks(cap, mamba, bs)
    plan = vfinish.kv_plan(s, arch) if arch is not None else None
    notes: list[str] = []
    if not blocks:
        return _failed_calibration(s, bs, plan, arch)
    if mamba is not None:
        block_bytes = float(mamba.block_bytes)
        notes.append(f"hybrid model: block size {mamba.block_size:,} (enlarged to hold a Mamba state), "
                     f"{mamba.attn_groups + mamba.mamba_groups} groups of {mamba.group_size} layers, "
                     f"mamba_cache_mode '{mamba.mode}'")
    elif plan is not None and not plan.hybrid and not plan.linear:
        extra = VllmCapacityFacts(cap).draft_kv_layers
        if isinstance(extra, int) and extra and arch is not None:
            plan = vfinish.kv_plan(s, arch, extra) or plan  # the draft layer the log's block count matched
        block_bytes = float(plan.block_bytes(bs))
    elif cap.available_kv_gib:
        low, high = vrules.implied_block_bytes(cap.available_kv_gib, blocks)
        block_bytes = (low + high) / 2
        notes.append("block bytes implied by the logged KV memory and block count (architecture not known; pass --model)")
    else:
        raise PredictionError("bytes per block unknown: pass --model (a config.json or model id)")
    total = vfinish.total_gib(s)
    ref = s.reference_rank
    util = vfinish.util(s)
    if util is None:
        notes.append("gpu_memory_utilization is not in the log and the release (hence its default) is not pinned: "
                     "pass --assume gpu_memory_utilization=… to predict utilization changes")
    return VllmCalibration(
        blocks=blocks, block_size=bs, block_bytes=block_bytes, kv_low_bytes=blocks * block_bytes,
        kv_high_bytes=(blocks + 1) * block_bytes - 1, util=util, total_gib=total, max_model_len=cap.max_model_len,
        kv_bytes=vfinish.kv_bytes(s, arch), tp=vfinish.tp_size(s), capacity_rule=vfinish.era_of(s).capacity_rule,
        free_at_ready_gib=ref.avail_at_ready_gib if ref else None, notes=notes, mamba=mamba,
        model=vfinish.model_name(s), arch=arch, pp=vfinish.pp_size(s),
        activation_gib=ref.activation_peak_gib if ref else None,
        weights_gib=ref.weights_gib if ref else None, non_torch_gib=ref.non_torch_gib if ref else None,
        batched_tokens_follow_max_len=_batched_follow_max_len(s), profile=_profile_shape(s),
        graphs_inside=vfinish.graphs_inside(s), eager=bool(_truthy(s.setting("enforce_eager"))),
        graph_estimate_gib=finite(VllmRankFacts(ref).cuda_graph_estimate_gib) if ref else None,
        **_draft_facts(s, arch),
    )


def _draft_facts(s: Startup, arch: Any) -> dict[str, Any]:
    """The logged run's drafter as plan would count it, with the target's config that prices another."""
    name = vfinish.model_name(s)
    mc = load_model_config(name) if name else None
    load_format = str(s.setting("load_format") or "") or None
    draft = None
    try:  # a speculative_config the log shows but kvscope cannot read leaves the drafter unpriced, not whatif dead
        if mc is not None and arch is not None and spec_request(s.settings) is not None:
            draft = resolve_vllm_draft(mc, arch, {**s.settings, "load_format": load_format},
                                       Parallel(tp=vfinish.tp_size(s), pp=vfinish.pp_size(s)))
    except (InputError, KeyError, TypeError, ValueError):
        draft = None
    return {"draft": draft, "model_config": mc, "load_format": load_format}


def _profile_shape(s: Startup) -> ProfileShape | None:
    """The V1 engine's profile run as the log and the release's defaults give it; None when the model's config
    is not at hand (pass --model) or the engine is V0 (its profile follows max_model_len: handled apart)."""
    version = parse_version(s.engine_version)
    era = vfinish.era_of(s)
    name = vfinish.model_name(s)
    mc = load_model_config(name) if name else None
    if era.engine != "V1" or mc is None:
        return None
    defaults: list[str] = []
    tokens = vfinish.setting_int(s, "max_num_batched_tokens")
    seqs = vfinish.setting_int(s, "max_num_seqs")
    if tokens is None or seqs is None:
        total = vfinish.total_gib(s) or 0.0
        d_tokens, d_seqs = vplan.vllm_batch_defaults(version or era.first, "V1", total, "", s.capacity.max_model_len or 0,
                                                     offline=False)
        if tokens is None:
            tokens, defaults = d_tokens, [*defaults, "max_num_batched_tokens"]
        if seqs is None:
            seqs, defaults = d_seqs, [*defaults, "max_num_seqs"]
    runner = "V2" if s.setting("model_runner") == "V2" else "V1"
    rule = vplan.vllm_sampler_rule(version or era.first, runner, None)
    return ProfileShape(cfg=mc.cfg, tp=vfinish.tp_size(s), batched_tokens=int(tokens), num_seqs=int(seqs),
                        rule=rule, from_defaults=tuple(defaults))


def _activation_shift(cal: VllmCalibration, changes: dict[str, Any], notes: list[str]) -> float:
    """GiB more (+) or less (−) activation peak under the new batch limits (the model's difference, added to the
    logged peak)."""
    p = cal.profile
    if p is None:
        raise PredictionError("the profile run's activation peak depends on the model's shape: pass --model (a "
                              "config.json or model id) to predict max_num_batched_tokens / max_num_seqs")
    tokens = int(changes.get("max_num_batched_tokens") or p.batched_tokens)
    seqs = int(changes.get("max_num_seqs") or p.num_seqs)
    # with the logged drafter's prefill inside the forward phase (it grows with the batched tokens)
    before, after = p.peak_gib(p.batched_tokens, p.num_seqs, cal.draft)[0], p.peak_gib(tokens, seqs, cal.draft)[0]
    shift = after - before
    if abs(shift) >= 0.005:
        base = cal.activation_gib
        moved = f"{base:.2f} → {base + shift:.2f} GiB" if base is not None else f"{shift:+.2f} GiB"
        notes.append(f"profile run at {tokens:,} batched tokens, {seqs:,} sequences: activation peak {moved}"
                     + (f" ({', '.join(p.from_defaults)} taken at the release default)" if p.from_defaults else ""))
    return shift


def _graph_shift(cal: VllmCalibration, eager: bool, notes: list[str]) -> float:
    """GiB more (+) or less (−) charged for CUDA graphs when enforce_eager changes."""
    if eager == cal.eager:
        return 0.0
    if cal.graphs_inside is False or (cal.graphs_inside is None and cal.graph_estimate_gib is None):
        notes.append("this release and runner charge no CUDA-graph estimate to the budget: the pool does not change "
                     "(the graphs come out of the memory outside it)" if cal.graphs_inside is False else
                     "whether the release charges its CUDA-graph estimate is not pinned: the pool is taken as unchanged")
        return 0.0
    if eager:  # graphs off: the estimate is no longer subtracted
        g = cal.graph_estimate_gib if cal.graph_estimate_gib is not None else vplan.VLLM_GRAPH_GIB
        notes.append(f"--enforce-eager: the {g:.2f} GiB CUDA-graph estimate is no longer subtracted")
        return -g
    notes.append(f"graphs on: vLLM would subtract its CUDA-graph estimate (typically ~{vplan.VLLM_GRAPH_GIB:.1f} GiB; "
                 "the eager log cannot say)")
    return vplan.VLLM_GRAPH_GIB


CARDS_NAMED = 4


def _total_unknown(cal: VllmCalibration) -> str:
    """Why a utilization change cannot be priced, and what would settle it: without the device total, the budget
    equation T × utilization = weights + activations + non-torch + KV bounds T from below by what the log shows,
    and the GPU catalog names the smallest cards that hold it; --assume gpu=… settles which one it was."""
    if cal.util is None:
        return ("gpu_memory_utilization is not in the log and its default depends on the release: pass "
                "--assume gpu_memory_utilization=… (and gpu=… if the device total is not logged either)")
    from kvscope.model.catalog import gpus, torch_total_gib

    shown = [x for x in (cal.weights_gib, cal.activation_gib, cal.non_torch_gib) if x is not None]
    kv = cal.kv_low_bytes / GIB
    floor = (sum(shown) + kv) / cal.util
    what = " + ".join(name for name, x in (("weights", cal.weights_gib), ("activations", cal.activation_gib),
                                            ("non-torch", cal.non_torch_gib)) if x is not None)
    fits = []
    for g in gpus():
        total = torch_total_gib(g)
        if total is not None and total >= floor:
            fits.append((total, g["name"]))
    named = ", ".join(f"{name} ({total:.1f} GiB)" for total, name in sorted(fits)[:CARDS_NAMED])
    return (f"the device total is not in the log: {what + ' + ' if what else ''}KV {kv:.2f} GiB at utilization "
            f"{cal.util:g} need a GPU of at least {floor:.1f} GiB"
            + (f"; the smallest catalog cards that hold it: {named}" if named else "")
            + ". Pass --assume gpu=… (the card it ran on) to price a utilization change")


V0_CHUNKED_BY_DEFAULT_ABOVE = 32768
V0_MIN_BATCHED_TOKENS = 2048


def _batched_follow_max_len(s: Startup) -> bool:
    chunked = s.setting("enable_chunked_prefill")
    return (vfinish.era_of(s).engine == "V0" and chunked not in (True, "True", "true", 1)
            and (s.capacity.max_model_len or 0) <= V0_CHUNKED_BY_DEFAULT_ABOVE
            and s.setting("max_num_batched_tokens") is None)


def _failed_calibration(s: Startup, bs: int, plan: Any, arch: Any) -> VllmCalibration:
    """A startup that stopped before it printed a block count: calibrate on the KV memory it did print
    ('Available KV cache memory', also when negative) and the bytes per block of the model's layout, else
    the bytes one max_model_len request needs ('X GiB KV cache is needed'). K = T × util − (non-KV terms)
    holds for the failed run too, so a utilization or max_model_len change is predicted the same way."""
    f, cap = s.failure, s.capacity
    data = f.data if f is not None else {}
    kv_gib = finite(data.get("available_kv_gib"), cap.available_kv_gib)
    if kv_gib is None:
        raise PredictionError("the log has no '# GPU blocks' / 'GPU KV cache size' line and no 'Available KV cache "
                              "memory' to calibrate on")
    need_gib, m = finite(data.get("kv_needed_gib")), data.get("max_model_len") or cap.max_model_len
    notes = [f"calibrated on a failed startup: its KV memory ({kv_gib} GiB, ± {vrules.HALF_CENT} as printed)"]
    if plan is not None and not plan.hybrid and not plan.linear:
        block_bytes = float(plan.block_bytes(bs))
        notes[0] += " and the model's bytes per block"
    elif need_gib and isinstance(m, int) and m > 0:
        block_bytes = need_gib * GIB / vrules.cdiv(m, bs)
        notes[0] += f" and the {need_gib} GiB one {m:,}-token request needs"
    else:
        raise PredictionError("the failed startup printed no bytes per token ('X GiB KV cache is needed'): pass --model")
    half = vrules.HALF_CENT * GIB
    low, high = kv_gib * GIB - half, kv_gib * GIB + half
    ref = s.reference_rank
    return VllmCalibration(
        blocks=max(0, int(kv_gib * GIB // block_bytes)), block_size=bs, block_bytes=block_bytes, kv_low_bytes=low,
        kv_high_bytes=high, util=vfinish.util(s), total_gib=vfinish.total_gib(s), max_model_len=m,
        kv_bytes=vfinish.kv_bytes(s, arch), tp=vfinish.tp_size(s), capacity_rule=vfinish.era_of(s).capacity_rule,
        free_at_ready_gib=ref.avail_at_ready_gib if ref else None, notes=notes, model=vfinish.model_name(s), arch=arch,
        pp=vfinish.pp_size(s), failed=True,
    )


def finite(*values: Any) -> float | None:
    """The first value that is a finite number."""
    for v in values:
        number = finite_number(v)
        if number is not None:
            return number
    return None


def _mamba_layout(s: Startup, arch: Any) -> vrules.MambaLayout | None:
    """The hybrid layout explain matched to the log (its draft tokens and prefix caching), if any."""
    kept = VllmCapacityFacts(s.capacity).hybrid_layout
    if arch is None or not isinstance(kept, dict):
        return None
    extra = VllmCapacityFacts(s.capacity).draft_kv_layers
    plan = vfinish.kv_plan(s, arch, extra if isinstance(extra, int) else 0, int(kept.get("draft_tokens") or 0),
                           bool(kept.get("prefix_caching")))
    return plan.mamba if plan is not None else None


def _logged_blocks(cap: Any, mamba: vrules.MambaLayout | None, bs: int) -> int | None:
    """Blocks behind a logged token count: tokens // block_size, or for a hybrid the count explain found."""
    if mamba is not None:
        kept = VllmCapacityFacts(cap).hybrid_layout or {}
        return kept.get("num_gpu_blocks")
    return cap.kv_tokens // bs if cap.kv_tokens else None


def _capacity(cal: VllmCalibration, kv_bytes: float, block_bytes: float, bs: int, m: int | None,
              mamba: vrules.MambaLayout | None = None) -> tuple[int, int, float | None]:
    blocks = max(0, int(kv_bytes // block_bytes))
    if mamba is not None and m:
        c = vrules.mamba_capacity_of_blocks(blocks, mamba, m, cal.capacity_rule)
        return blocks, c.tokens, c.concurrency
    c = vrules.capacity(blocks, bs, m, cal.capacity_rule)
    return blocks, c.tokens, (c.concurrency if m else None)


def predict(cal: VllmCalibration, changes: dict[str, Any], host_ram_gb: float | None = None,
            label: str | None = None) -> Scenario:
    changes = normalise_changes(changes, SUPPORTED, ALIASES, "vLLM")
    notes: list[str] = []
    low, high = cal.kv_low_bytes, cal.kv_high_bytes
    reserve = cal.free_at_ready_gib
    approximate = False
    if "kv_cache_memory_bytes" in changes:
        low = high = float(_bytes(changes["kv_cache_memory_bytes"]))
        notes.append("--kv-cache-memory-bytes fixes the KV size; gpu_memory_utilization no longer sizes it")
    elif "gpu_memory_utilization" in changes:
        if cal.util is None or cal.total_gib is None:
            raise PredictionError(_total_unknown(cal))
        delta = (float(changes["gpu_memory_utilization"]) - cal.util)
        low += delta * (cal.total_gib - 0.005) * GIB if delta >= 0 else delta * (cal.total_gib + 0.005) * GIB
        high += delta * (cal.total_gib + 0.005) * GIB if delta >= 0 else delta * (cal.total_gib - 0.005) * GIB
        if reserve is not None:
            reserve -= delta * cal.total_gib
    block_bytes, bs, mamba = cal.block_bytes, cal.block_size, cal.mamba
    if mamba is not None and ("kv_cache_dtype" in changes or "block_size" in changes):
        row = mamba.attn_row_bytes
        if "kv_cache_dtype" in changes:
            row = row * dtype_bytes(str(changes["kv_cache_dtype"])) // cal.kv_bytes
        mamba = vrules.mamba_relayout(mamba, row, int(changes["block_size"]) if "block_size" in changes else None)
        block_bytes, bs = float(mamba.block_bytes), mamba.block_size
        notes.append(f"hybrid model: the attention block is re-enlarged to {bs:,} tokens for the same Mamba state")
    elif "kv_cache_dtype" in changes:
        block_bytes = block_bytes * dtype_bytes(str(changes["kv_cache_dtype"])) / cal.kv_bytes
    if "block_size" in changes and mamba is None:
        new_bs = int(changes["block_size"])
        block_bytes, bs = block_bytes * new_bs / cal.block_size, new_bs
    if "tensor_parallel_size" in changes:
        approximate = True
        new_low, new_high, block_bytes = _tp_change(cal, _tp_value(changes["tensor_parallel_size"]), low, high,
                                                    block_bytes, mamba, notes)
        if "kv_cache_memory_bytes" not in changes:  # a fixed K stays fixed; only the block changes
            low, high = new_low, new_high
    if "speculative_config" in changes:
        if mamba is not None:
            raise PredictionError("a drafter on a hybrid (Mamba) model re-lays its state pages: not predicted")
        shift, block_bytes = _draft_change(cal, changes["speculative_config"], block_bytes, notes)
        if "kv_cache_memory_bytes" not in changes:
            low, high = low - shift * GIB, high - shift * GIB
        approximate = True
    if ("max_num_batched_tokens" in changes or "max_num_seqs" in changes or "enforce_eager" in changes) \
            and "kv_cache_memory_bytes" not in changes:
        shift = 0.0
        if "max_num_batched_tokens" in changes or "max_num_seqs" in changes:
            shift += _activation_shift(cal, changes, notes)
        if "enforce_eager" in changes:
            shift += _graph_shift(cal, bool(_truthy(changes["enforce_eager"])), notes)
        low, high = low - shift * GIB, high - shift * GIB
        approximate = approximate or shift != 0.0
    m = int(changes.get("max_model_len") or cal.max_model_len or 0) or None
    if "max_model_len" in changes and m and cal.max_model_len and cal.activation_gib and cal.batched_tokens_follow_max_len \
            and m <= V0_CHUNKED_BY_DEFAULT_ABOVE and "kv_cache_memory_bytes" not in changes:
        ratio = max(m, V0_MIN_BATCHED_TOKENS) / max(cal.max_model_len, V0_MIN_BATCHED_TOKENS)
        grown = cal.activation_gib * (ratio - 1)
        low, high = low - grown * GIB, high - grown * GIB
        approximate = True
        notes.append(f"V0 without chunked prefill profiles max(max_model_len, 2048) batched tokens: the activation "
                     f"peak scales from {cal.activation_gib:.2f} to {cal.activation_gib * ratio:.2f} GiB "
                     f"({-grown:+.2f} GiB of KV memory)")
    b_low, t_low, c_low = _capacity(cal, low, block_bytes, bs, m, mamba)
    b_high, t_high, _ = _capacity(cal, high, block_bytes, bs, m, mamba)
    need = mamba.blocks_per_request(m) if (mamba is not None and m) else (vrules.cdiv(m, bs) if m else 0)
    if m and b_low < need:
        notes.append(f"max_model_len {m:,} needs {need:,} blocks; only {b_low:,} fit: vLLM refuses to start")
    risk, words = _risk(reserve, 0.0) if reserve is not None else ("unknown", "free memory at ready not in the log")
    if t_high == 0:
        notes.append("no KV cache fits: vLLM would stop with 'No available memory for the cache blocks'")
        risk, words = "high", "no KV cache: the server would not start"
    host = _offload(changes, cal, host_ram_gb)
    flags = [f"drop {FLAGS[k]}" if k == "speculative_config" and spec_request({k: v}) is None
             else f"{FLAGS[k]} {_flag_text(v)}" for k, v in changes.items()]
    return Scenario(label=label or (", ".join(f"{k}={v}" for k, v in changes.items()) or "as logged"), changes=changes,
                    kv_tokens_low=t_low, kv_tokens_high=t_high, node_kv_tokens_low=t_low, node_kv_tokens_high=t_high,
                    context_tokens=m, concurrency_at_context=round(c_low, 2) if c_low is not None else None,
                    reserve_left_gib=round(reserve, 2) if reserve is not None else None,
                    reserve_basis="free at ready (observed, adjusted)" if reserve is not None else "unknown",
                    risk=risk, risk_words=words, flags=flags, notes=notes, host=host, approximate=approximate)


def _flag_text(value: Any) -> str:
    """A flag's value as the command line takes it (speculative_config as JSON, quoted)."""
    return f"'{json.dumps(value)}'" if isinstance(value, dict) else str(value)


def _draft_change(cal: VllmCalibration, value: Any, block_bytes: float, notes: list[str]) -> tuple[float, float]:
    """(GiB more the budget pays, new bytes per block) when the drafter is added, removed or replaced: its weights
    (loaded before the profile), its prefill's share of the profile peak, and a page in each of its KV layers per
    block id (plan_spec; the rules measured on vLLM 0.26's V2 runner, truth run 035)."""
    if cal.model_config is None or cal.arch is None or cal.profile is None:
        raise PredictionError("pricing a drafter needs the target's config: pass --model (a config.json or model id)")
    par = Parallel(tp=cal.tp, pp=cal.pp)
    try:
        new = resolve_vllm_draft(cal.model_config, cal.arch, {"speculative_config": value,
                                                              "load_format": cal.load_format}, par)
    except InputError as e:
        raise PredictionError(str(e)) from e
    old = cal.draft
    p = cal.profile
    peaks = [p.peak_gib(p.batched_tokens, p.num_seqs, d) for d in (old, new)]
    if any(extra is None for _, extra in peaks):
        notes.append("the drafter's share of the profile peak is modelled for EAGLE heads only: taken as unchanged")
        act = 0.0
    else:
        act = peaks[1][0] - peaks[0][0]
    weights = (new.weights_gib if new else 0.0) - (old.weights_gib if old else 0.0)

    def rows(d: VllmDraft | None) -> int:
        return d.row_bytes(cal.kv_bytes, cal.tp) * d.kv_layers if d is not None else 0

    new_block = block_bytes + cal.block_size * (rows(new) - rows(old))
    what = (f"drafter {new.method} ({new.kv_layers} KV layer(s), weights {new.weights_gib:.2f} GiB: {new.weights_from})"
            if new else "no drafter")
    was = f"{old.method} drafter" if old else "no drafter"
    notes.append(f"{was} → {what}: weights {weights:+.2f} GiB, profile peak {act:+.2f} GiB (the drafter's prefill "
                 f"beside the target's kept hidden states), {rows(new) - rows(old):+,} B of KV per token"
                 + ("; the runner's CUDA-graph estimate is not re-priced" if cal.graphs_inside else ""))
    if new is not None:
        notes += [n for n in new.notes if n.startswith("EAGLE head assumed")]
    return weights + act, new_block


def _tp_value(value: Any) -> int:
    try:
        tp = int(value)
    except (TypeError, ValueError):
        tp = 0
    if tp < 1:
        raise PredictionError(f"tensor_parallel_size must be a positive integer, got {value!r}")
    return tp


def _tp_change(cal: VllmCalibration, tp: int, low: float, high: float, block_bytes: float,
               mamba: vrules.MambaLayout | None, notes: list[str]) -> tuple[float, float, float]:
    """Another TP size: K moves by the weights' change per GPU (two estimates from the model's config)
    and a block by the KV heads each GPU then holds; communicators and activations are not re-priced."""
    delta = weights_delta_gib(cal.model, Parallel(tp=cal.tp, pp=cal.pp), Parallel(tp=tp, pp=cal.pp), vrules.VLLM_WEIGHTS)
    if delta is None or cal.arch is None or mamba is not None:
        why = ("hybrid Mamba layout" if mamba is not None else "no model named (pass --assume model=…)"
               if not cal.model else f"{cal.model} is not in the catalog")
        notes.append(f"TP {cal.tp} → {tp}: weights and KV heads per GPU both change; not predicted ({why})")
        return low, high, block_bytes
    row_old = vrules.page_size(cal.arch, cal.kv_bytes, cal.tp).bytes_per_token_per_layer
    row_new = vrules.page_size(cal.arch, cal.kv_bytes, tp).bytes_per_token_per_layer
    notes.append(f"TP {cal.tp} → {tp}: weights per GPU {'grow' if delta >= 0 else 'shrink'} by {abs(delta):.2f} GiB "
                 f"(estimated from {cal.model}'s config) and a token's KV per GPU goes from {row_old:,} to {row_new:,} "
                 "B per layer; NCCL and activation changes are not re-priced")
    return low - delta * GIB, high - delta * GIB, block_bytes * row_new / row_old


def _bytes(value: Any) -> int:
    text = str(value).strip().upper()
    for suffix, scale in (("GIB", GIB), ("G", GIB), ("MIB", 1 << 20), ("M", 1 << 20), ("K", 1 << 10)):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * scale)
    return int(float(text))


def _offload(changes: dict[str, Any], cal: VllmCalibration, host_ram_gb: float | None) -> dict[str, Any] | None:
    """--kv-offloading-size is GiB in total across TP × PP ranks (v0.12+); each rank pins its share."""
    if "kv_offloading_size" not in changes:
        return None
    total_gib = float(changes["kv_offloading_size"])
    per_rank_bytes = total_gib * GIB / cal.tp
    tokens = int(per_rank_bytes // cal.bytes_per_token)
    out: dict[str, Any] = {"host_tokens_per_rank": tokens, "extra_cacheable_tokens": tokens,
                           "per_rank_gib": round(per_rank_bytes / GIB, 2), "ranks_on_host": cal.tp,
                           "total_gb": round(total_gib * GIB / 1e9, 2), "replicated": False}
    if host_ram_gb is not None:
        margin = host_ram_gb - total_gib * GIB / 1e9
        out.update(host_ram_gb=host_ram_gb, fits=margin >= 10.0, margin_gb=round(margin, 2))
    return out


def standard_scenarios(cal: VllmCalibration) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if cal.util is not None and cal.total_gib is not None:
        for step in (-0.02, 0.01, 0.02, 0.04):
            value = round(cal.util + step, 2)
            if 0 < value <= 0.99:
                out.append({"gpu_memory_utilization": value})
    if cal.kv_bytes > 1:
        out.append({"kv_cache_dtype": "fp8"})
    if cal.max_model_len:
        out.append({"max_model_len": max(cal.block_size, cal.max_model_len // 2)})
    return out


def util_curve(cal: VllmCalibration, points: int = 21) -> list[dict[str, Any]]:
    if cal.util is None or cal.total_gib is None:
        return []
    out = []
    lo, hi = max(0.3, cal.util - 0.1), min(0.99, cal.util + 0.1)
    for i in range(points):
        u = round(lo + (hi - lo) * i / (points - 1), 3)
        sc = predict(cal, {"gpu_memory_utilization": u})
        out.append({"gpu_memory_utilization": u, "kv_tokens": sc.kv_tokens, "reserve_left_gib": sc.reserve_left_gib,
                    "risk": sc.risk})
    return out


def tokens_per_step(cal: VllmCalibration) -> int | None:
    if cal.total_gib is None:
        return None
    if cal.mamba is not None and cal.max_model_len:
        blocks = vrules.blocks_for(0.01 * cal.total_gib, int(cal.block_bytes))
        return int(blocks / cal.mamba.blocks_per_request(cal.max_model_len) * cal.max_model_len)
    return vrules.tokens_per_util_step(cal.total_gib, int(cal.block_bytes), cal.block_size)


__all__ = ["VllmCalibration", "_truthy", "calibrate", "predict", "standard_scenarios", "tokens_per_step", "util_curve"]


def can_calibrate(s: Startup) -> bool:
    """A logged block count or token count to calibrate on, or a failed startup's KV memory."""
    failed_kv = finite(s.failure.data.get("available_kv_gib"), s.capacity.available_kv_gib) if s.failure else None
    return bool(s.reconciliation is not None or s.capacity.num_gpu_blocks or s.capacity.kv_tokens
                or failed_kv is not None)


def build_prediction(startup: Startup, changes: dict[str, Any], context: int | None,
                     host_ram_gb: float | None) -> dict[str, Any]:
    cal = calibrate(startup)
    return assemble_prediction("vllm", cal, lambda ch, label: predict(cal, ch, host_ram_gb, label=label),
                               standard_scenarios(cal), changes, ("tokens_per_0_01_util", tokens_per_step(cal)),
                               ("util_curve", util_curve(cal)))


def calibration_line(pred: dict[str, Any]) -> str:
    """What the prediction was calibrated on, in one line for the terminal."""
    cal = pred["calibration"]
    step = pred.get("tokens_per_0_01_util")
    if cal.get("failed_startup"):
        return (f"Calibrated on the failed run: KV memory {cal['available_kv_gib_low']:.3f} – "
                f"{cal['available_kv_gib_high']:.3f} GiB, {cal['block_bytes']:,} B per block of {cal['block_size']} "
                f"tokens ({cal['num_gpu_blocks']:,} blocks fit)" + (f"; +0.01 utilization = +{step:,} tokens" if step else ""))
    return (f"Calibrated on the logged run: {cal['num_gpu_blocks']:,} blocks × {cal['block_size']} tokens, "
            f"{cal['block_bytes']:,} B per block, KV memory {cal['available_kv_gib_low']:.3f} – "
            f"{cal['available_kv_gib_high']:.3f} GiB" + (f"; +0.01 utilization = +{step:,} tokens" if step else ""))
