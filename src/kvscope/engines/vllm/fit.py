"""When the weights are the problem: how many GPUs, or which weight format, gives the KV cache room.

A startup that ran out of memory loading its weights, or whose weights left its budget nothing for the
KV cache, is not fixed by a utilization step when the weights alone fill (nearly) the whole GPU. The
expert's answer is then a split or a format, with its amount: "TP 2 leaves 56 GiB per GPU for KV",
"fp8 weights fit one GPU". Each candidate is priced the way vLLM sizes its pool (K = total ×
utilization − weights − activation peak − non-torch, docs/research/vllm-memory.md §1):

- calibrated on the log where it printed its KV memory (a negative "Available KV cache memory" too):
  K moves by exactly the weights' change per GPU, estimated twice from the model's config (the
  difference of two estimates of one checkpoint, so what the config cannot see cancels);
- from first principles where loading itself failed: the budget minus the weights per GPU
  (model/weights, vLLM's sharding), the profile run's activation peak (plan's model of it) and the
  non-torch memory a rank holds (CUDA context and, from TP 2, the communicators).

Tensor-parallel sizes are the powers of two that divide the attention heads, as vLLM requires
(``num_attention_heads % tensor_parallel_size == 0``). GiB = bytes / 2^30 throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.core.startup import Startup
from kvscope.engines.vllm import finish as vfinish
from kvscope.engines.vllm import rules
from kvscope.engines.vllm.layout import kv_layout
from kvscope.engines.vllm.plan import vllm_activation_gib
from kvscope.model.catalog import gpus, torch_total_gib
from kvscope.model.weights import (
    ModelConfig,
    Parallel,
    estimate_weights,
    load_model_config,
    quant_plan,
)

GIB = rules.GIB
MAX_TP = 64
# non-torch memory of one rank outside the weights: the CUDA context (~0.25 GiB on the H200 truth runs) and,
# from TP 2, NCCL's buffers (~0.5 GiB more on PCIe and NVLink boxes alike; overheads.py's figures)
NON_TORCH_TP1_GIB = 0.3
NCCL_GIB = 0.5
SIXTEEN_BIT = ("bfloat16", "float16", "half", "bf16", "fp16", "auto")


@dataclass(frozen=True)
class Split:
    """One way to place the model: its tensor-parallel size and weight format, and what it leaves for KV."""

    tp: int
    quantization: str | None  # None: the checkpoint's own format
    weights_gib: float  # per GPU
    kv_gib: float  # per GPU, after weights, activation peak and non-torch
    kv_tokens: int  # tokens the pool would hold (blocks × block size)
    bytes_per_token: int  # KV bytes of one token on one GPU
    calibrated: bool  # K moved from the log's own figure, else priced from first principles

    @property
    def holds_one_request(self) -> bool:
        return self.kv_tokens > 0

    def fits(self, context: int) -> bool:
        return self.kv_tokens >= context > 0


@dataclass(frozen=True)
class Placement:
    """The weights against the GPU: their size per GPU now, and the smallest splits that give KV its room."""

    weights_gib: float  # per GPU as the log ran (logged, else estimated)
    weights_logged: bool
    total_gib: float
    total_card: str | None  # the total was not logged: the smallest catalog card the log's figures fit
    util: float
    context: int  # the request length the pool must hold (max_model_len)
    at_max_util: Split | None  # this split and format with the utilization raised to max_util
    max_util: float
    split: Split | None  # the smallest TP of the checkpoint's format that holds one context-length request
    quantized: list[Split]  # smaller weight formats (fp8, 4-bit AWQ) at the smallest TP that holds it, 16-bit only

    @property
    def weights_share(self) -> float:
        return self.weights_gib / self.total_gib


def _tp_sizes(cfg: dict[str, object], start: int) -> list[int]:
    heads = cfg.get("num_attention_heads") or cfg.get("n_head")
    out, tp = [], start * 2
    while tp <= MAX_TP:
        if not isinstance(heads, int) or heads % tp == 0:
            out.append(tp)
        tp *= 2
    return out


def _weights(mc: ModelConfig, tp: int, pp: int, quantization: str | None) -> float | None:
    try:
        return estimate_weights(mc, Parallel(tp=tp, pp=pp), quantization=quantization,
                                rules=rules.VLLM_WEIGHTS).bytes_per_rank / GIB
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def _sixteen_bit(s: Startup, mc: ModelConfig) -> bool:
    if quant_plan(mc.cfg).method != "none" or s.setting("quantization"):
        return False
    dtype = str(s.setting("dtype") or mc.cfg.get("torch_dtype") or "bfloat16").lower()
    return dtype.replace("torch.", "") in SIXTEEN_BIT


CARD_MATCH_GIB = 0.05  # a logged total within this of a catalog card's torch total is that card


def _sm_major(total_gib: float | None, card: str | None) -> int | None:
    """The compute-capability major of the card: the one named, else the catalog card whose torch total the
    logged total is; None when no catalog card is that size."""
    for g in gpus():
        t = torch_total_gib(g)
        if g.get("compute_capability") and (g["name"] == card or (
                card is None and total_gib is not None and t is not None and abs(t - total_gib) <= CARD_MATCH_GIB)):
            return int(str(g["compute_capability"]).split(".")[0])
    return None


def smallest_card(floor_gib: float) -> tuple[float, str] | None:
    """The smallest catalog GPU (torch's total, GiB) of at least ``floor_gib``."""
    fits = [(t, g["name"]) for g in gpus() if (t := torch_total_gib(g)) is not None and t >= floor_gib]
    return min(fits) if fits else None


def bounded_total(s: Startup, u: float | None) -> tuple[float, str] | None:
    """A device total the log does not print, bounded by its own budget equation: total × utilization =
    weights + activation + non-torch + K, every term it did print (a negative K too), so the GPU is at least
    that large; the smallest catalog card that large stands for it (said so wherever it is used)."""
    ref = s.reference_rank
    k = s.capacity.available_kv_gib
    if k is None and s.failure is not None:
        k = s.failure.data.get("available_kv_gib")  # type: ignore[assignment]
    if ref is None or ref.weights_gib is None or not isinstance(k, (int, float)) or not u:
        return None
    shown = ref.weights_gib + float(k) + (ref.activation_peak_gib or 0.0) + (ref.non_torch_gib or 0.0)
    return smallest_card(shown / u - 0.01) if shown > 0 else None


def placement(s: Startup, max_util: float, min_tokens: int) -> Placement | None:
    """The weights' placement for a startup that failed for memory: None when the model, the device total or
    the utilization is unknown, or the layout has no plain per-token bytes (hybrid Mamba state pools). A smaller
    weight format on the GPUs the run had counts when it holds ``min_tokens`` of context (then with a shorter
    max_model_len); a split must hold the whole max_model_len."""
    total, u = vfinish.total_gib(s), vfinish.util(s)
    card = None
    if not total and (bound := bounded_total(s, u)) is not None:
        total, card = bound
    arch, _ = vfinish.arch_context(s)
    name = vfinish.model_name(s)
    mc = load_model_config(name) if name else None
    if not total or u is None or arch is None or mc is None:
        return None
    tp, pp = vfinish.tp_size(s), vfinish.pp_size(s)
    ref = s.reference_rank
    logged = ref.weights_gib if ref is not None else None
    now = _weights(mc, tp, pp, None)
    if now is None:
        return None
    # vLLM's max_model_len defaults to the model's own context (max_position_embeddings and its rope scaling)
    context = s.capacity.max_model_len or vfinish.setting_int(s, "max_model_len") or arch.max_position_embeddings or 0
    k = s.capacity.available_kv_gib
    if k is None and s.failure is not None:
        k = s.failure.data.get("available_kv_gib")  # type: ignore[assignment]
    bs = vfinish.block_size(s)
    kv_bytes = vfinish.kv_bytes(s, arch)
    act = None

    def priced(new_tp: int, quantization: str | None, util: float) -> Split | None:
        nonlocal act
        w = _weights(mc, new_tp, pp, quantization)
        layout = kv_layout(arch, kv_bytes, new_tp, pp, block_size=bs)
        if w is None or layout is None or layout.linear:
            return None
        if isinstance(k, (int, float)) and logged is not None:
            # the log's own K, moved by the weights' change (two estimates of one checkpoint) and, leaving one
            # GPU, by the communicators' buffers
            kv = float(k) + (now - w) - (NCCL_GIB if new_tp > 1 >= tp else 0.0) + (util - u) * total
            calibrated = True
        else:
            if act is None:
                tokens = vfinish.setting_int(s, "max_num_batched_tokens") or 8192
                seqs = vfinish.setting_int(s, "max_num_seqs") or 256
                act = vllm_activation_gib(mc.cfg, 1, tokens, seqs)
            activation = act / new_tp  # the forward's buffers shard with the MLP; the sampler's do not, but it is small
            kv = total * util - w - activation - NON_TORCH_TP1_GIB - (NCCL_GIB if new_tp > 1 else 0.0)
            calibrated = False
        block = layout.block_bytes(bs)
        tokens = max(0, int(kv * GIB // block)) * bs if kv > 0 else 0
        return Split(new_tp, quantization, w, kv, tokens, layout.bytes_per_token, calibrated)

    split = next((sp for t in _tp_sizes(mc.cfg, tp) if (sp := priced(t, None, u)) is not None and sp.fits(context)),
                 None)
    quantized = []
    if _sixteen_bit(s, mc):
        # fp8 where the card is known to run it (Marlin weight-only from SM 8.0, native from 8.9); a 4-bit AWQ
        # checkpoint everywhere vLLM runs (SM 7.5+). Each only helps if it needs fewer GPUs than the 16-bit split.
        sm = _sm_major(total if card is None else None, card)
        for method in (("fp8", "awq") if sm is not None and sm >= 8 else ("awq",)):
            here = priced(tp, method, u)  # on the GPUs it has, a shorter max_model_len is an honest price
            q = here if here is not None and here.kv_tokens >= min(context, min_tokens) else next(
                (sp for t in _tp_sizes(mc.cfg, tp) if (sp := priced(t, method, u)) is not None and sp.fits(context)),
                None)
            if q is not None and (split is None or q.tp < split.tp):
                quantized.append(q)
                if q.tp == tp:
                    break  # the format that fits as placed is enough; a smaller one only costs quality
    weights = logged if logged is not None else now
    return Placement(weights, logged is not None, total, card, u, context, priced(tp, None, max(u, max_util)),
                     max_util, split, quantized)


