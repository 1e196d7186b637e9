"""Weight bytes per GPU rank, from a checkpoint's own size or estimated from its config.json.

Why this exists: every engine's KV budget is "what is left after the weights", so a plan made
without a log is only as good as its weight figure. On a TP8 MoE box the KV pool can be 10 GiB next
to 72 GiB of weights, so a 1 % weight error is a 7 % KV error. We therefore count parameters by
component the way the engines shard them (vocab-parallel embedding, column/row-split attention and
MLP, MoE experts split over TP/EP, replicated MLA down-projections and routers) and price each
tensor by the checkpoint's own quantization (block / group scales included, ignored modules kept in
bf16).

When ``--model`` is a local directory with ``model.safetensors.index.json``, the checkpoint's exact
``metadata.total_size`` replaces our total and only the *split* (which share a rank holds) is ours.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvscope.core.startup import finite_number
from kvscope.model.arch import text_subconfig
from kvscope.model.catalog import catalog_entry, name_quantization, read_local_config
from kvscope.model.layout import NEUTRAL_LAYOUT, WeightRules

GIB = 1 << 30
VOCAB_PAD = 64  # engines pad the vocabulary to a multiple of 64 before splitting it over TP


# --------------------------------------------------------------------------------------------
# The model config as plan sees it
# --------------------------------------------------------------------------------------------


@dataclass
class ModelConfig:
    """A flattened config.json (text part of multimodal wrappers) and where it came from."""

    cfg: dict[str, Any]
    source: str
    local_dir: Path | None = None
    name: str = ""


def _normalise_catalog_config(entry: dict[str, Any]) -> dict[str, Any]:
    """Catalog entries keep extra fields apart and summarise long lists; undo both."""
    cfg = dict(entry["config"])
    for key, value in (entry.get("config_extra") or {}).items():
        if "." not in key and key not in cfg and not key.endswith("_note"):
            cfg[key] = value
    types = cfg.get("layer_types")
    if isinstance(types, dict):
        cfg["layer_types"] = types.get("full")
    if cfg.get("quantization_config") is None and isinstance(cfg.get("hf_quant_config"), dict):
        cfg["quantization_config"] = _from_hf_quant_config(cfg["hf_quant_config"])
    return cfg


def _from_hf_quant_config(hq: dict[str, Any]) -> dict[str, Any]:
    """ModelOpt's hf_quant_config.json → the quantization_config shape we read."""
    q = dict(hq.get("quantization") or hq)
    out: dict[str, Any] = {"quant_method": "modelopt", "quant_algo": q.get("quant_algo"),
                           "group_size": q.get("group_size")}
    if "exclude_modules_sample" in q:
        out["ignore_sample"] = q["exclude_modules_sample"]
        out["ignore_count"] = q.get("exclude_modules_count")
    elif "exclude_modules" in q:
        out["ignore"] = q["exclude_modules"]
    return out


def _flatten_text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """Multimodal wrappers nest the language model; keep the top-level quantization config."""
    sub = text_subconfig(cfg)
    if sub is None:
        return cfg
    merged = {**cfg, **sub, "_vision_config": cfg.get("vision_config"), "_outer_model_type": cfg.get("model_type")}
    if cfg.get("quantization_config") and not sub.get("quantization_config"):
        merged["quantization_config"] = cfg["quantization_config"]
    return merged


def load_model_config(model: str) -> ModelConfig | None:
    """config.json of a local directory/file first, then the built-in catalog; None if neither."""
    local = read_local_config(model)
    if local is not None:
        cfg, cfg_path = local
        if cfg.get("quantization_config") is None:
            hq = cfg_path.parent / "hf_quant_config.json"
            if hq.is_file():
                with contextlib.suppress(OSError, ValueError):
                    cfg["quantization_config"] = _from_hf_quant_config(json.loads(hq.read_text()))
        return ModelConfig(_flatten_text_config(cfg), f"config.json at {cfg_path}",
                           cfg_path.parent, str(Path(model).expanduser()))
    entry = catalog_entry(model)
    if entry:
        cfg = _normalise_catalog_config(entry)
        implied = name_quantization(model, entry)
        if implied and not cfg.get("quantization_config"):
            cfg["quantization_config"] = implied
        return ModelConfig(_flatten_text_config(cfg), f"built-in catalog ({entry['hf_id']})", None, entry["hf_id"])
    return None


# --------------------------------------------------------------------------------------------
# Quantization: bytes of one linear weight of shape [out, in]
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scheme:
    """How one linear layer's weight is stored: element bits plus its scales/zero points."""

    label: str
    bits: float = 16
    group: int | None = None  # elements per scale along the input dim (None: per output channel)
    block: tuple[int, int] | None = None  # fp8 block scales [out, in]
    scale_bytes: float = 2
    zero_bits: float = 0  # packed zero points per group per output row (GPTQ/AWQ qzeros)
    per_tensor: bool = False
    g_idx: bool = False  # GPTQ keeps an int32 input-channel permutation

    def linear_bytes(self, out_f: int, in_f: int) -> int:
        """Bytes of one weight of [out_f, in_f] stored this way (scales included)."""
        return sum(self.linear_parts(out_f, in_f))

    def linear_parts(self, out_f: int, in_f: int) -> list[int]:
        """The separate tensors one weight is stored as: data, then scales, zero points, g_idx."""
        data = int(out_f * in_f * self.bits / 8)
        if self.bits >= 16:
            return [data]
        if self.per_tensor:
            return [data, int(self.scale_bytes)]
        if self.block:
            return [data, int(math.ceil(out_f / self.block[0]) * math.ceil(in_f / self.block[1]) * self.scale_bytes)]
        groups = math.ceil(in_f / self.group) if self.group else 1
        parts = [data, int(groups * out_f * self.scale_bytes)]
        if self.zero_bits:
            parts.append(int(groups * out_f * self.zero_bits / 8))
        if self.g_idx:
            parts.append(in_f * 4)
        return parts


BF16 = Scheme("bf16")


def _int_scheme(label: str, bits: int, group: int | None, symmetric: bool, gptq_style: bool) -> Scheme:
    """INT4/INT8 with group scales; GPTQ/AWQ/AutoRound store packed zero points even when symmetric."""
    group = group if group and group > 0 else None
    zero = bits if (gptq_style or not symmetric) else 0
    return Scheme(label, bits=bits, group=group, scale_bytes=2, zero_bits=zero)


def _scheme_from_weights_args(w: dict[str, Any], method: str) -> Scheme:
    """A compressed-tensors / modelopt ``weights`` block → Scheme."""
    bits = int(w.get("num_bits") or 16)
    kind = str(w.get("type") or "int")
    group = w.get("group_size")
    strategy = str(w.get("strategy") or ("group" if group else "tensor"))
    if bits >= 16:
        return BF16
    if kind == "float" and bits == 4:
        group = group or 16
        # NVFP4: fp8 scale per 16; MXFP4 (group 32): e8m0 scale per 32 — both one byte per group
        return Scheme(f"{method} fp4 (scale per {group})", bits=4, group=group, scale_bytes=1)
    if kind == "float" and bits == 8:
        block = w.get("block_structure")
        if strategy == "block" and isinstance(block, list) and len(block) == 2:
            return Scheme(f"{method} fp8 block {block}", bits=8, block=(int(block[0]), int(block[1])), scale_bytes=4)
        if strategy == "channel":
            return Scheme(f"{method} fp8 per-channel", bits=8, group=None, scale_bytes=4)
        return Scheme(f"{method} fp8 per-tensor", bits=8, per_tensor=True, scale_bytes=4)
    sym = bool(w.get("symmetric", True))
    return _int_scheme(f"{method} int{bits} (group {group or 'channel'})", bits,
                       group if strategy == "group" else None, sym, gptq_style=False)


@dataclass
class QuantPlan:
    """Which scheme each module gets: groups of (targets, scheme) plus modules left unquantized."""

    method: str
    groups: list[tuple[list[str], Scheme]] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    ignore_is_sample: bool = False
    experts_only: bool = False  # mxfp4 (gpt-oss): only MoE experts are quantized
    expert_scheme: Scheme | None = None  # routed experts stored apart from the rest (DeepSeek-V4 expert_dtype fp4)
    notes: list[str] = field(default_factory=list)
    # each target list's _Targets, made on first use: (the list, its length then, the index)
    _indexes: dict[int, tuple[list[str], int, _Targets]] = field(default_factory=dict, init=False, repr=False,
                                                                 compare=False)

    def scheme_for(self, module: str, kind: str) -> Scheme:
        """The scheme of one linear module ('Linear' targets = every linear, ignore list wins)."""
        if kind == "expert" and self.expert_scheme is not None:
            return self.expert_scheme
        if kind in ("embedding", "norm", "router", "bf16") or not self.groups:
            return BF16
        if self.experts_only and kind != "expert":
            return BF16
        if self._index(self.ignore).matches(module):
            return BF16
        for targets, scheme in self.groups:
            if "Linear" in targets or "*" in targets or self._index(targets).matches(module):
                return scheme
        return BF16

    def _index(self, targets: list[str]) -> _Targets:
        """The list's _Targets, made again only if the list was grown since (plans are built by appending)."""
        got = self._indexes.get(id(targets))
        if got is None or got[0] is not targets or got[1] != len(targets):
            got = self._indexes[id(targets)] = (targets, len(targets), _Targets(targets))
        return got[2]

    @property
    def label(self) -> str:
        labels = {s.label for _, s in self.groups} | ({f"experts {self.expert_scheme.label}"} if self.expert_scheme else set())
        return ", ".join(sorted(labels)) or "unquantized (bf16)"


WRAPPER_PREFIXES = ("model.language_model.", "language_model.model.", "language_model.", "backbone.")


def _matches(pattern: str, module: str) -> bool:
    """compressed-tensors 're:' regexes, ModelOpt/HF globs, or plain module prefixes, at any depth.

    Our module names are canonical ``model.layers.N…``; checkpoints of multimodal wrappers spell
    the same module ``model.language_model.layers.N…`` or ``language_model.model.layers.N…``.
    """
    if pattern.startswith("re:"):
        rx = pattern[3:]
        return any(re.match(rx, s) for s in _suffixes(module))
    for variant in _pattern_variants(pattern):
        full = _glob_rx(variant)
        if any(full.match(s) for s in _suffixes(module)):
            return True
    return False


class _Targets:
    """A list of target patterns, as ``any(_matches(t, module) for t in targets)`` reads it, fast.

    Why: ModelOpt's MIXED_PRECISION configs list every quantized module by name (thousands), and
    matching each module against each name compiled a regex every time (a minute to plan one
    model). A plain name matches a module exactly when it equals one of the module's suffixes or a
    dotted prefix of one: a set lookup. Globs and ``re:`` patterns keep ``_matches``.
    """

    def __init__(self, targets: list[str] | tuple[str, ...]) -> None:
        plain = {t for t in targets if not t.startswith("re:") and not any(c in t for c in "*?[")}
        self.names = {v for t in plain for v in _pattern_variants(t)}
        self.others = [t for t in targets if t not in plain]

    def matches(self, module: str) -> bool:
        if self.names:
            for suffix in _suffixes(module):
                if suffix in self.names:
                    return True
                dot = suffix.find(".")
                while dot != -1:
                    if suffix[:dot] in self.names:
                        return True
                    dot = suffix.find(".", dot + 1)
        return any(_matches(t, module) for t in self.others)


@functools.lru_cache(maxsize=4096)
def _glob_rx(variant: str) -> re.Pattern[str]:
    rx = fnmatch.translate(variant).replace(r"\Z", "")
    return re.compile(rf"(?:{rx})(?:\..*)?\Z", re.S)


def _pattern_variants(pattern: str) -> list[str]:
    out = [pattern]
    for prefix in WRAPPER_PREFIXES:
        if pattern.startswith(prefix):
            rest = pattern[len(prefix):]
            out += [rest, "model." + rest]
    return out


def _suffixes(module: str) -> list[str]:
    """'model.layers.3.mlp' → itself, 'layers.3.mlp', '3.mlp', 'mlp' (prefixes differ by wrapper)."""
    parts = module.split(".")
    return [".".join(parts[i:]) for i in range(len(parts))]


def _generalise(names: list[str]) -> list[str]:
    """A truncated ignore sample: widen per-layer names to all layers (the sample shows kinds)."""
    out = []
    for n in names:
        out.append(n)
        if not n.startswith("re:"):
            out.append(re.sub(r"\.layers\.\d+\.", ".layers.*.", n))
    return sorted(set(out))


def _ignore_list(q: dict[str, Any]) -> tuple[list[str], bool]:
    for key in ("ignore", "modules_to_not_convert", "exclude_modules", "ignored_layers"):
        value = q.get(key)
        if isinstance(value, list):
            return [str(v) for v in value], False
        if isinstance(value, dict) and isinstance(value.get("sample"), list):
            truncated = (value.get("count") or 0) > len(value["sample"])
            return (_generalise(value["sample"]) if truncated else value["sample"]), truncated
    if isinstance(q.get("ignore_sample"), list):
        truncated = (q.get("ignore_count") or 0) > len(q["ignore_sample"])
        return (_generalise(q["ignore_sample"]) if truncated else q["ignore_sample"]), truncated
    return [], False


MXFP4 = Scheme("mxfp4 (4 bits + e8m0 scale per 32)", bits=4, group=32, scale_bytes=1)


def quant_plan(cfg: dict[str, Any], override: str | None = None) -> QuantPlan:
    """Read quantization_config (or a --quantization override) into per-module schemes."""
    plan = _quant_plan(cfg, override)
    if str(cfg.get("expert_dtype") or "").lower() == "fp4" and not override:
        # DeepSeek-V4: the routed experts ship as MXFP4 (packed e2m1, one e8m0 scale per 32) although
        # quantization_config says fp8 for everything (that is the rest of the model)
        plan.expert_scheme = MXFP4
    return plan


def _quant_plan(cfg: dict[str, Any], override: str | None) -> QuantPlan:
    q = cfg.get("quantization_config") or {}
    method = str(override or q.get("quant_method") or "").lower().replace("_", "-")
    if not method or method in ("none", "bf16", "fp16", "bfloat16", "float16", "unquantized"):
        return QuantPlan("none")
    ignore, truncated = _ignore_list(q)
    plan = QuantPlan(method, ignore=ignore, ignore_is_sample=truncated)
    if q.get("assumed_from_name") and not override and method != "gguf":  # gguf: said below as not modelled
        plan.notes.append(f"{method} assumed from the model name {q['assumed_from_name']!r} (the catalog has the "
                          "unquantized model; its usual layout counted): give the checkpoint's config.json for its "
                          "exact layout")
    if truncated:
        plan.notes.append("ignore list is a truncated sample: per-layer entries widened to all layers")
    if method == "fp8" or method == "fbgemm-fp8":
        _fp8_requantized_experts(q, plan)
        block = q.get("weight_block_size")
        if block:
            scheme = Scheme(f"fp8 block {block[0]}x{block[1]}", bits=8, block=(int(block[0]), int(block[1])),
                            scale_bytes=4)
        elif method == "fbgemm-fp8":
            scheme = Scheme("fp8 per-channel", bits=8, group=None, scale_bytes=4)
        else:
            scheme = Scheme("fp8 per-tensor", bits=8, per_tensor=True, scale_bytes=4)
        plan.groups.append((["Linear"], scheme))
        if "lm_head" not in plan.ignore and not is_deepseek_v4(cfg):
            # both engines keep the output head (ParallelLMHead) unquantized; DeepSeek-V4 ships its head in
            # fp8 and a PP2×TP4 vLLM worker ledger (19.47 GiB with non-torch) only fits it that way
            plan.ignore.append("lm_head")
    elif method in ("gptq", "gptq-marlin", "awq", "awq-marlin", "auto-round", "autoround", "intel/auto-round"):
        bits = int(q.get("bits") or q.get("w_bit") or 4)
        group = q.get("group_size") or q.get("q_group_size") or 128
        sym = bool(q.get("sym", q.get("symmetric", True)))
        scheme = _int_scheme(f"{method} int{bits} (group {group})", bits, int(group), sym, gptq_style=True)
        if method.startswith("gptq"):
            scheme = replace(scheme, g_idx=True)
        plan.groups.append((["Linear"], scheme))
        if not q.get("lm_head"):
            plan.ignore.append("lm_head")
    elif method == "mxfp4":
        plan.experts_only = True
        plan.groups.append((["Linear"], MXFP4))
    elif method in ("compressed-tensors", "modelopt", "modelopt-fp4"):
        _compressed_groups(q, plan)
    elif method in ("bitsandbytes", "bnb"):
        plan.groups.append((["Linear"], Scheme("bitsandbytes 4-bit (absmax per 64)", bits=4, group=64, scale_bytes=4)))
        plan.ignore.append("lm_head")
    else:
        plan.notes.append(f"quantization {method!r} not modelled: weights counted as bf16")
    return plan


def _fp8_requantized_experts(q: dict[str, Any], plan: QuantPlan) -> None:
    """An fp8 checkpoint whose ``config_groups`` re-quantize some modules (ModelOpt MIXED_PRECISION over
    DeepSeek-V4's FP8: nvidia/DeepSeek-V4-*-NVFP4). The groups' ignore list (attention, shared experts,
    head, MTP) names what stays fp8, not bf16, and what the groups do reach is the routed experts."""
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        return
    schemes = [_scheme_from_weights_args(g.get("weights") or {}, "modelopt") for g in groups.values()
               if isinstance(g, dict)]
    low = [sc for sc in schemes if sc.bits < 8]
    if low:
        plan.expert_scheme = low[0]
        plan.ignore, plan.ignore_is_sample = [], False
        plan.notes = [n for n in plan.notes if not n.startswith("ignore list")]
        plan.notes.append(f"routed experts re-quantized to {low[0].label} over an fp8 checkpoint "
                          "(the groups' ignore list keeps attention, shared experts and head in fp8)")


def _compressed_groups(q: dict[str, Any], plan: QuantPlan) -> None:
    """compressed-tensors / ModelOpt: config_groups with targets, or a bare quant_algo."""
    groups = q.get("config_groups")
    if isinstance(groups, dict) and groups:
        for g in groups.values():
            targets = g.get("targets") or ["Linear"]
            plan.groups.append(([str(t) for t in targets], _scheme_from_weights_args(g.get("weights") or {}, plan.method)))
        return
    algo = str(q.get("quant_algo") or "").upper()
    if algo == "NVFP4":
        group = int(q.get("group_size") or 16)
        plan.groups.append((["Linear"], Scheme(f"nvfp4 (4 bits + fp8 scale per {group})", bits=4, group=group,
                                               scale_bytes=1)))
    elif algo in ("FP8", "FP8_PER_CHANNEL_PER_TOKEN"):
        plan.groups.append((["Linear"], Scheme("fp8 per-tensor (modelopt)", bits=8, per_tensor=True, scale_bytes=4)))
    elif algo == "W4A8_AWQ" or algo == "W4A16_AWQ":
        plan.groups.append((["Linear"], _int_scheme("modelopt int4 awq", 4, int(q.get("group_size") or 128), True, False)))
    else:
        plan.notes.append(f"ModelOpt quant_algo {algo or '?'} without per-module groups: weights counted as bf16")


# --------------------------------------------------------------------------------------------
# Parameter layout: every tensor a rank holds
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Parallel:
    """How the engine shards the model: TP, expert parallel, pipeline stages, attention DP."""

    tp: int = 1
    ep: int = 1
    pp: int = 1
    attn_tp: int | None = None  # SGLang DP attention: attention split over tp // dp only
    replicate_embedding: bool = False  # SGLang DP attention keeps the input embedding whole
    # (intermediate per partition, hidden) multiples the MoE kernel pads expert weights to; (1, 1) none
    expert_pad: tuple[int, int] = (1, 1)

    @property
    def attention_tp(self) -> int:
        return self.attn_tp or self.tp


@dataclass
class Tensor:
    """One weight (or a stack of identical ones) as a rank holds it."""

    component: str  # embeddings | attention | mlp | experts | shared_experts | router | lm_head | norms | ...
    module: str  # representative module name, for quantization ignore/target matching
    kind: str  # linear | expert | embedding | norm | router | bf16 (a linear every checkpoint keeps in bf16)
    out_f: int
    in_f: int
    count: int = 1  # identical copies on this rank (e.g. local experts)
    bias: int = 0  # bias elements per copy (bf16)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, multiple: int) -> int:
    return _cdiv(a, multiple) * multiple


def mxfp4_expert_pad(rules: WeightRules, sm_major: int | None) -> tuple[int, int]:
    """(intermediate per partition, hidden) multiples an engine pads MXFP4 expert weights to.

    The padding follows the MoE kernel each engine picks for the GPU (mxfp4.py create_weights):
    vLLM runs Marlin where the GPU has no MXFP4 path of its own (SM 8.x, SM 12.x: intermediate to
    128, hidden to 256 — gpt-oss-20b's 2,880 become 2,944 and 3,072, +0.86 GiB on an A100, which
    vLLM 0.19 logged as 13.72 GiB), FlashInfer's TRT-LLM kernels on SM 10.x (256, 256) and OpenAI's
    Triton kernels on SM 9.0 (64, none). SGLang: FlashInfer on SM 10.x (256, 256), Triton elsewhere
    (64, none). Unknown GPU: no padding.
    """
    if sm_major is None:
        return 1, 1
    if sm_major == 10:
        return 256, 256
    if rules.marlin_mxfp4_off_hopper and sm_major != 9:
        return 128, 256
    return 64, 1


def _g(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


def _mla_attention(cfg: dict[str, Any], prefix: str, tp: int, h: int) -> list[Tensor]:
    """DeepSeek-style MLA: down-projections replicated, up-projections and o_proj split over TP."""
    heads = int(cfg["num_attention_heads"])
    nope, rope = int(cfg.get("qk_nope_head_dim") or 128), int(cfg.get("qk_rope_head_dim") or 64)
    v_dim, kv_lora = int(cfg.get("v_head_dim") or 128), int(cfg["kv_lora_rank"])
    q_lora = cfg.get("q_lora_rank")
    hr = _cdiv(heads, tp)
    out = []
    if q_lora:
        out += [Tensor("attention", f"{prefix}.q_a_proj", "linear", int(q_lora), h),
                Tensor("attention", f"{prefix}.q_b_proj", "linear", hr * (nope + rope), int(q_lora)),
                Tensor("norms", f"{prefix}.q_a_layernorm", "norm", int(q_lora), 1)]
    else:
        out.append(Tensor("attention", f"{prefix}.q_proj", "linear", hr * (nope + rope), h))
    out += [Tensor("attention", f"{prefix}.kv_a_proj_with_mqa", "linear", kv_lora + rope, h),
            Tensor("norms", f"{prefix}.kv_a_layernorm", "norm", kv_lora, 1),
            Tensor("attention", f"{prefix}.kv_b_proj", "linear", hr * (nope + v_dim), kv_lora),
            Tensor("attention", f"{prefix}.o_proj", "linear", h, hr * v_dim)]
    idx_dim, idx_heads = cfg.get("index_head_dim"), cfg.get("index_n_heads")
    if idx_dim and idx_heads and q_lora:  # DSA indexer (DeepSeek-V3.2, GLM-5): replicated
        out += [Tensor("attention", f"{prefix}.indexer.wq_b", "linear", int(idx_heads) * int(idx_dim), int(q_lora)),
                Tensor("attention", f"{prefix}.indexer.wk", "linear", int(idx_dim), h),
                Tensor("norms", f"{prefix}.indexer.k_norm", "norm", 2 * int(idx_dim), 1),
                Tensor("router", f"{prefix}.indexer.weights_proj", "router", int(idx_heads), h)]
    return out


def _gqa_attention(cfg: dict[str, Any], prefix: str, tp: int, h: int) -> list[Tensor]:
    """MHA/GQA: q and o split over TP; K/V heads split too but never below one head per rank."""
    heads = int(cfg["num_attention_heads"])
    kv = int(_g(cfg, "num_key_value_heads", default=heads) or heads)
    hd = int(cfg.get("head_dim") or h // heads)
    hr, kvr = _cdiv(heads, tp), max(1, kv // tp)
    gated = str(cfg.get("model_type", "")).startswith(("qwen3_next", "qwen3_5")) or cfg.get("attn_output_gate")
    bias = bool(cfg.get("attention_bias")) or str(cfg.get("model_type", "")).startswith("qwen2")
    q_out = hr * hd * (2 if gated else 1)
    out = [Tensor("attention", f"{prefix}.q_proj", "linear", q_out, h, bias=q_out if bias else 0),
           Tensor("attention", f"{prefix}.k_proj", "linear", kvr * hd, h, bias=kvr * hd if bias else 0),
           Tensor("attention", f"{prefix}.v_proj", "linear", kvr * hd, h, bias=kvr * hd if bias else 0),
           Tensor("attention", f"{prefix}.o_proj", "linear", h, hr * hd,
                  bias=h if cfg.get("model_type") == "gpt_oss" else 0)]
    if cfg.get("use_qk_norm") or str(cfg.get("model_type", "")).startswith(("qwen3", "gemma3", "olmo2")):
        out.append(Tensor("norms", f"{prefix}.q_norm", "norm", 2 * hd, 1))
    if cfg.get("model_type") == "gpt_oss":
        out.append(Tensor("attention", f"{prefix}.sinks", "norm", hr, 1))
    return out


def _linear_attention(cfg: dict[str, Any], prefix: str, tp: int, h: int) -> list[Tensor]:
    """Gated DeltaNet (Qwen3-Next / Qwen3.5): projections split over TP; conv and gates small."""
    nk, nv = int(cfg["linear_num_key_heads"]), int(cfg["linear_num_value_heads"])
    dk, dv = int(cfg["linear_key_head_dim"]), int(cfg["linear_value_head_dim"])
    conv = int(cfg.get("linear_conv_kernel_dim") or 4)
    qkv = (2 * nk * dk + nv * dv) // tp
    return [Tensor("attention", f"{prefix}.in_proj_qkv", "linear", qkv, h),
            Tensor("attention", f"{prefix}.in_proj_z", "linear", nv * dv // tp, h),
            Tensor("attention", f"{prefix}.in_proj_ba", "linear", 2 * nv // tp, h),
            Tensor("attention", f"{prefix}.conv1d", "norm", qkv * conv, 1),
            Tensor("norms", f"{prefix}.gates", "norm", 2 * nv // tp + dv, 1),
            Tensor("attention", f"{prefix}.out_proj", "linear", h, nv * dv // tp)]


def _dsv4_attention(cfg: dict[str, Any], prefix: str, i: int, tp: int, h: int) -> list[Tensor]:
    """DeepSeek-V4 attention: one shared 512-wide KV head, grouped low-rank output, a compressor per layer.

    Shapes from the checkpoint (sgl-project/sglang models/deepseek_v4.py, compressor.py): the down
    projections ``wq_a``/``wkv``, the compressor and the C4 indexer are replicated on every attention-TP
    rank; ``wq_b``, ``wo_a`` (o_groups × o_lora_rank rows) and ``wo_b`` are split. A layer of compress
    ratio 4 holds a double-width compressor and an indexer, one of ratio 128 a single compressor, one of
    ratio 0 neither. Compressors, the indexer's head weights and the router stay bf16; the mHC mixing
    weights are fp32 (counted as two bf16 elements each).
    """
    heads, hd = int(cfg["num_attention_heads"]), int(cfg.get("head_dim") or 512)
    q_lora, hr = int(cfg.get("q_lora_rank") or h), _cdiv(heads, tp)
    groups, o_lora = int(cfg.get("o_groups") or 1), int(cfg.get("o_lora_rank") or hd)
    ratios = compress_ratios(cfg)
    ratio = ratios[i] if i < len(ratios) else 0
    out = [Tensor("attention", f"{prefix}.wq_a", "linear", q_lora, h),
           Tensor("attention", f"{prefix}.wkv", "linear", hd, h),
           Tensor("attention", f"{prefix}.wq_b", "linear", hr * hd, q_lora),
           Tensor("attention", f"{prefix}.wo_a", "linear", _cdiv(groups * o_lora, tp), heads * hd // groups),
           Tensor("attention", f"{prefix}.wo_b", "linear", h, _cdiv(groups * o_lora, tp)),
           Tensor("norms", f"{prefix}.q_norm", "norm", q_lora + hd + 2 * hr, 1)]  # q/kv norms, fp32 attn_sink
    if ratio:
        coff = 2 if ratio == 4 else 1
        out += [Tensor("attention", f"{prefix}.compressor.wkv_gate", "bf16", 2 * coff * hd, h),
                Tensor("norms", f"{prefix}.compressor.ape", "norm", 2 * ratio * coff * hd, 1)]
    idx_heads, idx_dim = cfg.get("index_n_heads"), cfg.get("index_head_dim")
    if ratio == 4 and idx_heads and idx_dim:
        ih, idim = int(idx_heads), int(idx_dim)
        out += [Tensor("attention", f"{prefix}.indexer.wq_b", "linear", ih * idim, q_lora),
                Tensor("attention", f"{prefix}.indexer.weights_proj", "bf16", ih, h),
                Tensor("attention", f"{prefix}.indexer.compressor.wkv_gate", "bf16", 2 * 2 * idim, h),
                Tensor("norms", f"{prefix}.indexer.compressor.ape", "norm", 2 * ratio * 2 * idim, 1)]
    hc = int(cfg.get("hc_mult") or 0)
    if hc:  # hc_attn_fn and hc_ffn_fn: (2 + hc)·hc × hc·hidden, fp32
        out.append(Tensor("norms", f"{prefix}.hc_fn", "norm", 2 * (2 + hc) * hc, 2 * hc * h))
    if i < int(cfg.get("num_hash_layers") or 0):  # hash-routed layers: token → expert table, int64
        out.append(Tensor("router", f"{prefix}.gate.tid2eid", "norm", int(cfg.get("vocab_size") or 0),
                          4 * int(cfg.get("num_experts_per_tok") or 1)))
    return out


def routed_experts(cfg: dict[str, Any]) -> int:
    """The routed experts a MoE config names (each family spells the key differently); 0 for a dense model."""
    return int(cfg.get("n_routed_experts") or cfg.get("num_experts") or cfg.get("num_local_experts") or 0)


def _moe_layer(cfg: dict[str, Any], i: int) -> bool:
    """Is decoder layer i a MoE layer? (each family spells it differently)"""
    experts = _g(cfg, "n_routed_experts", "num_experts", "num_local_experts")
    if not experts:
        return False
    types = cfg.get("mlp_layer_types")
    if isinstance(types, list) and i < len(types):
        return "dense" not in str(types[i]).lower()
    if i < int(cfg.get("first_k_dense_replace") or 0):
        return False
    if i in (cfg.get("mlp_only_layers") or []):
        return False
    freq = cfg.get("moe_layer_freq") or 1
    if isinstance(freq, list):  # one 0/1 flag per layer (MiMo-V2-Flash, MiniMax-M3)
        return i < len(freq) and bool(freq[i])
    step = int(cfg.get("interleave_moe_layer_step") or cfg.get("decoder_sparse_step") or 1)
    return (i + 1) % step == 0 and i % int(freq) == 0


def _expert_inter_per_rank(cfg: dict[str, Any], par: Parallel) -> int:
    """One expert's intermediate size on a rank: split over the TP ranks that expert parallel leaves."""
    inter = int(_g(cfg, "moe_intermediate_size", "intermediate_size", default=1))
    ep = max(1, min(par.ep, par.tp))
    return _cdiv(inter, max(1, par.tp // ep))


def _mlp(cfg: dict[str, Any], prefix: str, i: int, par: Parallel, h: int) -> list[Tensor]:
    """Dense MLP, or MoE experts (E/ep local experts, each split over tp/ep) + shared experts + router."""
    tp = par.tp
    if not _moe_layer(cfg, i):
        inter = int(_g(cfg, "intermediate_size_mlp", "intermediate_size", default=4 * h))
        ir = _cdiv(inter, tp)
        return [Tensor("mlp", f"{prefix}.gate_proj", "linear", ir, h), Tensor("mlp", f"{prefix}.up_proj", "linear", ir, h),
                Tensor("mlp", f"{prefix}.down_proj", "linear", h, ir)]
    experts = int(_g(cfg, "n_routed_experts", "num_experts", "num_local_experts"))
    local, ir = _cdiv(experts, max(1, min(par.ep, tp))), _expert_inter_per_rank(cfg, par)
    ir, he = _round_up(ir, par.expert_pad[0]), _round_up(h, par.expert_pad[1])
    gpt_oss = cfg.get("model_type") == "gpt_oss"
    router = "router" if gpt_oss else "gate"
    out = [Tensor("experts", f"{prefix}.experts.0.gate_proj", "expert", ir, he, count=local, bias=ir if gpt_oss else 0),
           Tensor("experts", f"{prefix}.experts.0.up_proj", "expert", ir, he, count=local, bias=ir if gpt_oss else 0),
           Tensor("experts", f"{prefix}.experts.0.down_proj", "expert", he, ir, count=local, bias=he if gpt_oss else 0),
           Tensor("router", f"{prefix}.{router}", "router", experts, h, bias=experts if gpt_oss else 0)]
    inter = int(_g(cfg, "moe_intermediate_size", "intermediate_size"))
    shared_inter = int(cfg.get("n_shared_experts") or 0) * inter or int(cfg.get("shared_expert_intermediate_size") or 0)
    if shared_inter:
        name = "shared_experts" if cfg.get("n_shared_experts") else "shared_expert"
        sr = _cdiv(shared_inter, tp)
        out += [Tensor("shared_experts", f"{prefix}.{name}.gate_proj", "linear", sr, h),
                Tensor("shared_experts", f"{prefix}.{name}.up_proj", "linear", sr, h),
                Tensor("shared_experts", f"{prefix}.{name}.down_proj", "linear", h, sr)]
        if cfg.get("shared_expert_intermediate_size"):
            out.append(Tensor("router", f"{prefix}.shared_expert_gate", "router", 1, h))
    return out


@dataclass(frozen=True)
class RopeDims:
    """What sizes a rope table: positions, rotary dimension, and whether it is DeepSeek's YaRN rope."""

    positions: int
    rotary_dim: int
    yarn: bool


def rope_dims(cfg: dict[str, Any]) -> RopeDims:
    """Positions and rotary dimension of the cos/sin table an engine builds, from the config.

    MLA models rotate qk_rope_head_dim; a YaRN rope_scaling (or transformers' rope_parameters) sizes the
    table as original positions × factor; others rotate head_dim × partial_rotary_factor over
    max_position_embeddings. Unreadable fields fall back rather than fail.
    """
    positions = int(finite_number(cfg.get("max_position_embeddings")) or 0)
    mla = bool(cfg.get("kv_lora_rank"))
    yarn = False
    if mla:
        for key in ("rope_scaling", "rope_parameters"):
            block = cfg.get(key)
            if isinstance(block, dict) and str(block.get("type") or block.get("rope_type") or "") in ("yarn",
                                                                                                   "deepseek_yarn"):
                original, factor = finite_number(block.get("original_max_position_embeddings")), finite_number(block.get("factor"))
                if original and factor and original > 0 and factor > 0:
                    positions, yarn = int(original * factor), True
                    break
        rd = int(finite_number(cfg.get("qk_rope_head_dim")) or 64)
    elif is_deepseek_v4(cfg):  # one shared 512-wide head, of which qk_rope_head_dim rotate
        rd = int(finite_number(cfg.get("qk_rope_head_dim")) or 64)
    else:
        heads = int(finite_number(cfg.get("num_attention_heads")) or 1) or 1
        head_dim = int(finite_number(cfg.get("head_dim")) or int(finite_number(cfg.get("hidden_size")) or 0) // heads)
        rd = int(head_dim * (finite_number(cfg.get("partial_rotary_factor")) or 1.0))
    return RopeDims(max(0, positions), max(0, rd), yarn)


def compress_ratios(cfg: dict[str, Any]) -> list[int]:
    """DeepSeek-V4's compress ratio per layer (one more entry, 0, for the MTP layer); numbers only."""
    raw = cfg.get("compress_ratios")
    if not isinstance(raw, list):
        return []
    # an unreadable entry counts as ratio 0 (no compressor) and keeps its place, so later layers keep theirs
    return [int(r) if isinstance(r, (int, float)) and not isinstance(r, bool) and math.isfinite(r) else 0 for r in raw]


def is_deepseek_v4(cfg: dict[str, Any]) -> bool:
    """DeepSeek-V4's compressed sparse attention (a compress ratio per layer), whatever the model_type says."""
    return bool(compress_ratios(cfg)) and bool(cfg.get("o_lora_rank") or cfg.get("o_groups")
                                               or str(cfg.get("model_type")) in DSV4_TYPES)


DSV4_TYPES = ("deepseek_v4", "deepseek_ref")


def _layer_kind(cfg: dict[str, Any], i: int) -> str:
    types = cfg.get("layer_types")
    if isinstance(types, list) and i < len(types) and "linear" in str(types[i]):
        return "linear"
    interval = cfg.get("full_attention_interval")
    if cfg.get("linear_num_key_heads") and isinstance(interval, int) and interval > 1:
        return "full" if (i + 1) % interval == 0 else "linear"
    return "full"


def _nemotron_h_block(cfg: dict[str, Any], i: int, prefix: str, par: Parallel, h: int) -> list[Tensor] | None:
    """Nemotron-H's layer i: one mixer each, by hybrid_override_pattern (M Mamba-2, * attention, E MoE, - MLP), and
    one norm; None for other models. Its MLPs and experts have no gate (relu²: up and down only), and a Mamba-2 mixer
    projects hidden to z, x, B, C and dt in one in_proj (NemotronHConfig, modeling_nemotron_h). 58.92 GiB logged
    for Nemotron-3-Nano-30B-A3B on vLLM 0.26 (tests/fixtures/gpu/042); counting every layer as all three gave 190."""
    pattern = cfg.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or i >= len(pattern):
        return None
    kind, tp = pattern[i], par.tp
    norm = [Tensor("norms", f"{prefix}.norm", "norm", h, 1)]
    if kind == "M":
        heads, hd = int(cfg.get("mamba_num_heads") or 0), int(cfg.get("mamba_head_dim") or 0)
        inner = heads * hd or int(cfg.get("expand") or 2) * h
        groups, state = int(cfg.get("n_groups") or 1), int(cfg.get("ssm_state_size") or 128)
        xbc = inner + 2 * groups * state
        conv = int(cfg.get("conv_kernel") or 4)
        return norm + [Tensor("attention", f"{prefix}.mixer.in_proj", "linear", _cdiv(inner + xbc + heads, tp), h),
                       Tensor("attention", f"{prefix}.mixer.conv1d", "norm", _cdiv(xbc, tp) * conv, 1),
                       Tensor("norms", f"{prefix}.mixer.A_log", "norm", _cdiv(3 * heads, tp) + _cdiv(inner, tp), 1),
                       Tensor("attention", f"{prefix}.mixer.out_proj", "linear", h, _cdiv(inner, tp))]
    if kind == "*":
        return norm + _gqa_attention(cfg, f"{prefix}.mixer", par.attention_tp, h)
    if kind == "-":
        ir = _cdiv(int(cfg.get("intermediate_size") or 4 * h), tp)
        return norm + [Tensor("mlp", f"{prefix}.mixer.up_proj", "linear", ir, h),
                       Tensor("mlp", f"{prefix}.mixer.down_proj", "linear", h, ir)]
    experts = routed_experts(cfg)
    if kind != "E" or not experts:
        return None  # a block letter this model layer does not know: the generic decoder layer
    local, ir = _cdiv(experts, max(1, min(par.ep, tp))), _expert_inter_per_rank(cfg, par)
    out = norm + [Tensor("experts", f"{prefix}.mixer.experts.0.up_proj", "expert", ir, h, count=local),
                  Tensor("experts", f"{prefix}.mixer.experts.0.down_proj", "expert", h, ir, count=local),
                  Tensor("router", f"{prefix}.mixer.gate", "router", experts, h)]
    shared = int(cfg.get("moe_shared_expert_intermediate_size") or 0) * max(1, int(cfg.get("n_shared_experts") or 1))
    if shared:
        sr = _cdiv(shared, tp)
        out += [Tensor("shared_experts", f"{prefix}.mixer.shared_experts.up_proj", "linear", sr, h),
                Tensor("shared_experts", f"{prefix}.mixer.shared_experts.down_proj", "linear", h, sr)]
    return out


def decoder_layer(cfg: dict[str, Any], i: int, par: Parallel) -> list[Tensor]:
    """All tensors one rank holds for decoder layer i."""
    h = int(cfg["hidden_size"])
    prefix = f"model.layers.{i}"
    block = _nemotron_h_block(cfg, i, prefix, par, h)
    if block is not None:
        return block
    if _layer_kind(cfg, i) == "linear":
        attn = _linear_attention(cfg, f"{prefix}.linear_attn", par.attention_tp, h)
    elif is_deepseek_v4(cfg):
        attn = _dsv4_attention(cfg, f"{prefix}.attn", i, par.attention_tp, h)
    elif cfg.get("kv_lora_rank"):
        attn = _mla_attention(cfg, f"{prefix}.self_attn", par.attention_tp, h)
    else:
        attn = _gqa_attention(cfg, f"{prefix}.self_attn", par.attention_tp, h)
    norms = [Tensor("norms", f"{prefix}.input_layernorm", "norm", 2 * h, 1)]
    return attn + norms + _mlp(cfg, f"{prefix}.mlp", i, par, h)


def stage_layers(num_layers: int, pp: int, stage: int) -> range:
    """Layers of one pipeline stage: an even split, the remainder on the last stages."""
    base, rem = divmod(num_layers, pp)
    sizes = [base + (1 if s >= pp - rem else 0) for s in range(pp)]
    start = sum(sizes[:stage])
    return range(start, start + sizes[stage])


# Model types whose transformers config class ties the output layer to the embeddings when config.json says
# nothing (Gemma*Config, GPT2Config and OPTConfig default tie_word_embeddings=True; Llama, Qwen, Mistral… False).
# gemma-2-9b-it's published config.json has no such key: its 1.71 GiB lm_head is the embedding (17.22 GiB of
# weights on vLLM 0.26, tests/fixtures/gpu/011).
TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text", "gpt2", "opt"})


def ties_embeddings(cfg: dict[str, Any]) -> bool:
    value = cfg.get("tie_word_embeddings")
    return bool(value) if value is not None else str(cfg.get("model_type") or "") in TIED_BY_DEFAULT


def rank_tensors(cfg: dict[str, Any], par: Parallel, stage: int = 0) -> list[Tensor]:
    """Every tensor on one rank of a pipeline stage (embeddings on the first, lm_head on the last)."""
    h, vocab = int(cfg["hidden_size"]), int(cfg.get("vocab_size") or 32000)
    layers = int(cfg["num_hidden_layers"])
    vocab_rows = _cdiv(_cdiv(vocab, VOCAB_PAD) * VOCAB_PAD, par.tp)
    out: list[Tensor] = []
    if stage == 0:
        rows = vocab if par.replicate_embedding else vocab_rows
        out.append(Tensor("embeddings", "model.embed_tokens", "embedding", rows, h))
    for i in stage_layers(layers, par.pp, stage):
        out += decoder_layer(cfg, i, par)
    if stage == par.pp - 1:
        out.append(Tensor("norms", "model.norm", "norm", h, 1))
        if not ties_embeddings(cfg) or par.pp > 1:
            out.append(Tensor("lm_head", "lm_head", "linear", vocab_rows, h))
    return out


# --------------------------------------------------------------------------------------------
# The estimate
# --------------------------------------------------------------------------------------------


@dataclass
class WeightEstimate:
    """Weight bytes on the busiest rank, by component, and how the figure was obtained."""

    bytes_per_rank: int
    by_component: dict[str, int]
    quantization: str
    method: str  # "estimated from config.json" | "checkpoint size (safetensors index), split by estimate"
    checkpoint_bytes: int | None = None  # whole checkpoint, as counted or as the index states
    notes: list[str] = field(default_factory=list)

    @property
    def gib(self) -> float:
        return self.bytes_per_rank / GIB

    def as_dict(self) -> dict[str, Any]:
        return {"gib_per_rank": self.gib, "bytes_per_rank": self.bytes_per_rank,
                "by_component_gib": {k: v / GIB for k, v in self.by_component.items()},
                "quantization": self.quantization, "method": self.method,
                "checkpoint_gib": None if self.checkpoint_bytes is None else self.checkpoint_bytes / GIB,
                "notes": self.notes}


def tensor_parts(t: Tensor, plan: QuantPlan, dtype_bytes: int) -> list[int]:
    """The separate allocations one (stacked) weight makes: each part of its scheme × local copies, then
    its bias. An engine that stacks experts holds each part as one tensor of all of them."""
    if t.kind == "norm":
        return [t.out_f * t.in_f * dtype_bytes * t.count]
    scheme = plan.scheme_for(t.module, t.kind)
    parts = [t.out_f * t.in_f * dtype_bytes] if scheme.bits >= 16 else scheme.linear_parts(t.out_f, t.in_f)
    out = [part * t.count for part in parts if part]
    if t.bias:
        out.append(t.bias * dtype_bytes * t.count)
    return out


def _tensor_bytes(t: Tensor, plan: QuantPlan, dtype_bytes: int) -> int:
    return sum(tensor_parts(t, plan, dtype_bytes))


def _sum(tensors: list[Tensor], plan: QuantPlan, dtype_bytes: int) -> dict[str, int]:
    by: dict[str, int] = {}
    for t in tensors:
        by[t.component] = by.get(t.component, 0) + _tensor_bytes(t, plan, dtype_bytes)
    return by


# Vision towers of multimodal checkpoints whose catalog entry keeps only the text config. Source:
# the release's own config.json ``vision_config`` (moonshotai/Kimi-K2.5: MoonViT, 27 blocks of 1152;
# Qwen/Qwen3.6-35B-A3B, the Qwen3.5/3.6 MoE ViT: 27 blocks of 1152, 16-pixel patches merged 2×2,
# projected to the text width), and for ``max_pixels`` its preprocessor_config.json
# (``size.longest_edge`` 16,777,216 pixels: 16,384 tokens per image at most).
KNOWN_VISION_CONFIGS: dict[str, dict[str, Any]] = {
    "kimi_k25": {"vt_hidden_size": 1152, "vt_intermediate_size": 4304, "vt_num_hidden_layers": 27, "patch_size": 14,
                 "init_pos_emb_height": 64, "init_pos_emb_width": 64, "merge_kernel_size": [2, 2],
                 "mm_projector_type": "patchmerger", "text_hidden_size": 7168},
    "qwen3_5_moe": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16, "patch_size": 16,
                    "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3,
                    "num_position_embeddings": 2304, "max_pixels": 16777216},
}


def _vision_config(cfg: dict[str, Any]) -> dict[str, Any] | None:
    v = cfg.get("_vision_config")
    if isinstance(v, dict) and v:
        return v
    for model_type in (cfg.get("model_type"), cfg.get("_outer_model_type")):
        if model_type in KNOWN_VISION_CONFIGS:
            return KNOWN_VISION_CONFIGS[model_type]
    return None


def _vision_bytes(cfg: dict[str, Any], attn_tp: int = 1) -> int:
    """The vision tower (+ projector) per rank in bf16; 0 when its shape is unknown.

    ``attn_tp``: the ranks its attention (fused qkv and out projection) is split over. SGLang's
    Kimi-K2.5 tower (MoonViT) splits attention over the attention-TP ranks and keeps the MLP, patch
    embedding and projector whole on each (models/kimi_k25.py: VisionAttention with qkv parallel,
    plain nn.Linear MLP); other engines and towers: whole on every rank.
    """
    return sum(_vision_parts(cfg, attn_tp))


def vision_attn_tp(cfg: dict[str, Any], par: Parallel, rules: WeightRules) -> int:
    """The ranks a vision tower's attention is split over: SGLang's MoonViT over attention-TP, else 1."""
    return par.attention_tp if rules.shards_moonvit_attention and (_vision_config(cfg) or {}).get("vt_hidden_size") else 1


def vision_allocations(cfg: dict[str, Any], par: Parallel, rules: WeightRules) -> list[int]:
    """The vision tower's tensors on one SGLang rank, in bf16 (what the allocator books)."""
    return _vision_parts(cfg, vision_attn_tp(cfg, par, rules))


def _vision_parts(cfg: dict[str, Any], attn_tp: int = 1) -> list[int]:
    """MoonViT (``vt_*`` keys) and Qwen2.5/3-VL-style ViTs (``spatial_merge_size``): see
    ``_patch_vit_parts``. Other ViTs: depth × (4h² + 2·h·mlp), biases and embeddings ignored."""
    v = _vision_config(cfg)
    if not v:
        return []
    if v.get("vt_hidden_size"):
        h, patch = int(v["vt_hidden_size"]), int(v.get("patch_size") or 14)
        positions = int(v.get("init_pos_emb_height") or 0) * int(v.get("init_pos_emb_width") or 0)
        return _patch_vit_parts(int(v["vt_num_hidden_layers"]), h, int(v["vt_intermediate_size"]), 3 * patch * patch,
                                positions, int(math.prod(v.get("merge_kernel_size") or [2, 2])),
                                int(v.get("text_hidden_size") or cfg.get("hidden_size") or h), final_norm=True,
                                attn_tp=attn_tp)
    depth = _g(v, "depth", "num_hidden_layers", "num_layers")
    h, mlp = _vit_widths(v)
    if not depth or not h:
        return []
    if not v.get("spatial_merge_size"):
        return [(4 * h**2 + 2 * h * mlp) * 2] * int(depth)
    return _patch_vit_parts(int(depth), h, mlp, _pixels_per_patch(v), int(v.get("num_position_embeddings") or 0),
                            int(v["spatial_merge_size"]) ** 2, int(v.get("out_hidden_size") or cfg.get("hidden_size") or h))


def _patch_vit_parts(depth: int, h: int, mlp: int, pixels: int, positions: int, k2: int, text: int,
                     final_norm: bool = False, attn_tp: int = 1) -> list[int]:
    """A patch ViT with a merger, in bf16, tensor by tensor: per block fused qkv, out and a 2-layer MLP
    (all with bias) and two norms; a patch embedding of ``pixels`` values per patch, learned
    positions; a merger of k² patches (norm, k²·h → k²·h → text width). MoonViT adds a final norm."""
    a = max(1, attn_tp)
    block = [3 * h * h // a, 3 * h // a, h * h // a, h, mlp * h, mlp, h * mlp, h, h, h, h, h]
    embed = [pixels * h, h, positions * h]
    merger = [h, h, (k2 * h) ** 2, k2 * h, text * k2 * h, text]
    return [2 * n for n in block * depth + embed + ([h, h] if final_norm else []) + merger]


def _vit_widths(v: dict[str, Any]) -> tuple[int, int]:
    """(hidden, MLP width) of a ViT config; hidden 0 when not given."""
    h = int(_g(v, "hidden_size", "embed_dim", "width", default=0) or 0)
    return h, int(_g(v, "intermediate_size", default=None) or int(h * float(v.get("mlp_ratio") or 4)))


def _pixels_per_patch(v: dict[str, Any]) -> int:
    """Pixel values one patch holds: channels × frames × patch² (Qwen-style ViTs embed 2 frames at once)."""
    patch = int(v.get("patch_size") or 14)
    return int(v.get("in_channels") or 3) * int(v.get("temporal_patch_size") or 2) * patch * patch


def vision_profile_shape(cfg: dict[str, Any]) -> dict[str, int] | None:
    """What vLLM's encoder profiling runs on for a Qwen-style ViT: the most tokens one image may make
    (``max_pixels`` / (patch × merge)²) and the ViT's widths; None where the tower or its image size
    limit is not known."""
    v = _vision_config(cfg)
    if not v or not v.get("spatial_merge_size") or not v.get("max_pixels"):
        return None
    patch, merge = int(v.get("patch_size") or 14), int(v["spatial_merge_size"])
    h, mlp = _vit_widths(v)
    if not h:
        return None
    return {"tokens_per_item": int(v["max_pixels"]) // (patch * patch * merge * merge), "merge": merge, "hidden": h,
            "mlp": mlp, "pixel_values": _pixels_per_patch(v)}


def mla_absorbed_parts(cfg: dict[str, Any], par: Parallel, plan: QuantPlan, rules: WeightRules, stage: int = 0) -> list[int]:
    """MLA engines split kv_b_proj into absorbed w_kc / w_vc matrices after loading: their tensors.

    SGLang makes contiguous copies (in bf16 when kv_b_proj was block-quantized, since it is
    dequantized first) and keeps kv_b_proj too; vLLM keeps views of the weight, which only cost
    memory when the weight had to be dequantized. Per layer: w_kc (heads on this rank × nope ×
    kv_lora_rank) and w_vc (heads × v head dim × kv_lora_rank), bf16.
    """
    if not cfg.get("kv_lora_rank") or is_deepseek_v4(cfg):
        return []
    quantized = plan.scheme_for("model.layers.1.self_attn.kv_b_proj", "linear").bits < 16
    if not rules.copies_absorbed_mla and not quantized:
        return []
    heads, kv_lora = _cdiv(int(cfg["num_attention_heads"]), par.attention_tp), int(cfg["kv_lora_rank"])
    w_kc = heads * int(cfg.get("qk_nope_head_dim") or 128) * kv_lora * 2
    w_vc = heads * int(cfg.get("v_head_dim") or 128) * kv_lora * 2
    return [w_kc, w_vc] * len(stage_layers(int(cfg["num_hidden_layers"]), par.pp, stage))


def mla_absorbed_bytes(cfg: dict[str, Any], par: Parallel, plan: QuantPlan, rules: WeightRules, stage: int = 0) -> int:
    """Bytes of ``mla_absorbed_parts``."""
    return sum(mla_absorbed_parts(cfg, par, plan, rules, stage))


def estimate_weights(mc: ModelConfig, par: Parallel, quantization: str | None = None,
                     dtype_bytes: int = 2, rules: WeightRules = NEUTRAL_LAYOUT, sm_major: int | None = None) -> WeightEstimate:
    """Weight bytes on the busiest rank; the checkpoint's own size replaces our total when it is local.

    ``sm_major`` (the GPU's compute capability) decides kernel padding of MXFP4 experts; unknown, none.
    """
    cfg = mc.cfg
    plan = quant_plan(cfg, quantization)
    if plan.method == "mxfp4":
        par = replace(par, expert_pad=mxfp4_expert_pad(rules, sm_major))
        inter_mult, hidden_mult = par.expert_pad
        ir, h = _expert_inter_per_rank(cfg, par), int(cfg["hidden_size"])
        if _round_up(ir, inter_mult) != ir or _round_up(h, hidden_mult) != h:
            plan.notes.append(f"MXFP4 experts padded as {rules.label}'s MoE kernel on SM {sm_major}.x needs: intermediate "
                              f"{ir:,} → {_round_up(ir, inter_mult):,} per rank, hidden {h:,} → "
                              f"{_round_up(h, hidden_mult):,}")
    stages = [_sum(rank_tensors(cfg, par, s), plan, dtype_bytes) for s in range(par.pp)]
    for s, d in enumerate(stages):
        absorbed = mla_absorbed_bytes(cfg, par, plan, rules, s)
        if absorbed:
            d["mla absorbed w_kc/w_vc (engine copy)"] = absorbed
    worst_stage = max(range(par.pp), key=lambda st: sum(stages[st].values()))
    worst = stages[worst_stage]
    kept = kept_mxfp4_scales(cfg, par, plan, rules, sm_major, worst_stage)
    if kept:
        worst[KEPT_SCALES_COMPONENT] = kept
        plan.notes.append("SGLang's MXFP4 Marlin path on Hopper keeps the loader's float32 expert scales next to "
                          "its own e8m0 copy (+0.125 B per expert weight; an 8×H200 DeepSeek-V4-Pro TP8 log "
                          "reports 125.65 GiB); other MoE backends and newer releases may free them")
    vision_tp = vision_attn_tp(cfg, par, rules)
    vision = _vision_bytes(cfg, vision_tp)
    if vision:
        worst["vision"] = vision
    notes = list(plan.notes)
    multimodal = any("ConditionalGeneration" in a or "VL" in a for a in (cfg.get("architectures") or []))
    if vision:
        how = "config" if isinstance(cfg.get("_vision_config"), dict) else "the release's config (built-in table)"
        where = (f"its attention split over {vision_tp} ranks, the rest whole on each" if vision_tp > 1
                 else "replicated on every rank")
        notes.append(f"vision tower {vision / GIB:.2f} GiB from {how}, {where}")
    elif multimodal or cfg.get("_vision_config") is not None:
        notes.append("multimodal model: the vision tower's size is unknown here and is not counted "
                     "(add it with --set extra_weights_gib=…)")
    per_rank = sum(worst.values())
    est = WeightEstimate(per_rank, worst, plan.label, "estimated from config.json", notes=notes)
    unsplit = sum(_sum(rank_tensors(cfg, Parallel()), plan, dtype_bytes).values()) + _vision_bytes(cfg)
    est.checkpoint_bytes = unsplit
    index_total = checkpoint_total_bytes(mc.local_dir) if mc.local_dir else None
    if index_total:
        nextn = _nextn_bytes(cfg, plan, dtype_bytes)
        scale = index_total / max(1, unsplit + nextn)
        est.by_component = {k: (v if "engine copy" in k else int(v * scale)) for k, v in worst.items()}
        est.bytes_per_rank = sum(est.by_component.values())
        est.checkpoint_bytes = index_total
        est.method = "checkpoint size (model.safetensors.index.json), split over ranks by the config estimate"
        est.notes.append(f"checkpoint total {index_total / GIB:.2f} GiB vs config estimate "
                         f"{(unsplit + nextn) / GIB:.2f} GiB (scale {scale:.4f})")
    return est


KEPT_SCALES_COMPONENT = "fp32 expert scales SGLang keeps (Hopper MXFP4 Marlin, engine copy)"


def kept_mxfp4_scales(cfg: dict[str, Any], par: Parallel, plan: QuantPlan, rules: WeightRules,
                              sm_major: int | None, stage: int = 0) -> int:
    """Bytes of expert scales SGLang holds beyond the checkpoint's on Hopper (0 elsewhere).

    Its fp8 MoE loader allocates DeepSeek-V4's per-32 expert scales as float32 (4 B, not the 1 B e8m0
    on disk); the Marlin post-processing writes an e8m0 copy under a new name and leaves the float32
    parameter registered (sgl-project/sglang layers/quantization/fp8.py, marlin_utils_fp4.py). Per
    expert weight: 4/32 B kept. Only measured on H200 (SM 9.0) with the Marlin backend.
    """
    if not rules.keeps_fp32_mxfp4_scales_on_hopper or sm_major != 9 or plan.expert_scheme is not MXFP4:
        return 0
    elements = sum(t.out_f * t.in_f * t.count for t in rank_tensors(cfg, par, stage) if t.kind == "expert")
    return elements * 4 // 32


def _nextn_bytes(cfg: dict[str, Any], plan: QuantPlan, dtype_bytes: int) -> int:
    """MTP/NextN layers ship in the checkpoint but are not loaded for the target model."""
    n = int(cfg.get("num_nextn_predict_layers") or 0)
    if not n:
        return 0
    last = int(cfg["num_hidden_layers"])
    return n * sum(_sum(decoder_layer(cfg, last, Parallel()), plan, dtype_bytes).values())


def decoder_layer_bytes(cfg: dict[str, Any], i: int, par: Parallel, quantization: str | None = None,
                        dtype_bytes: int = 2) -> int:
    """Bytes one rank holds for decoder layer i (a drafter's MTP layer or EAGLE head sized like it)."""
    return sum(_sum(decoder_layer(cfg, i, par), quant_plan(cfg, quantization), dtype_bytes).values())


def checkpoint_total_bytes(directory: Path | None) -> int | None:
    """metadata.total_size of a local safetensors index (exact bytes of every tensor), else None."""
    if directory is None:
        return None
    index = directory / "model.safetensors.index.json"
    if not index.is_file():
        return None
    try:
        meta = json.loads(index.read_text()).get("metadata") or {}
        total = int(meta.get("total_size") or 0)
    except (OSError, ValueError, TypeError):
        return None
    return total or None


def sglang_parallel(tp: int, attn_tp: int | None = None, ep: int = 1, pp: int = 1,
                    dp_attention: bool | None = None) -> Parallel:
    """SGLang's sharding: with DP attention (by default: attn_tp < tp) attention splits over attn_tp
    only and the input embedding stays whole on every rank."""
    if dp_attention is None:
        dp_attention = attn_tp is not None and attn_tp < tp
    return Parallel(tp=tp, ep=ep, pp=pp, attn_tp=attn_tp if dp_attention else None, replicate_embedding=dp_attention)


def weights_estimate_gib(model: str | None, par: Parallel, rules: WeightRules) -> float | None:
    """The config estimate of the weights per GPU under ``par``; None when the model is unknown."""
    mc = load_model_config(model) if model else None
    if mc is None:
        return None
    try:
        return estimate_weights(mc, par, rules=rules).bytes_per_rank / GIB
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def weights_delta_gib(model: str | None, before: Parallel, after: Parallel,
                      rules: WeightRules) -> float | None:
    """How many GiB per GPU the weights grow (or shrink) from one sharding to another, by the
    estimate from the model's config; None when the model is unknown.

    A difference of two estimates of the same checkpoint: what the config cannot tell (a vision tower
    of unknown size, load-time extras) cancels out, so it can be added to weights a log printed.
    """
    old, new = weights_estimate_gib(model, before, rules), weights_estimate_gib(model, after, rules)
    return None if old is None or new is None else new - old
