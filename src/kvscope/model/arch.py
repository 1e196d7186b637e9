"""KV bytes per token from an HF ``config.json``: the architecture side of every capacity question.

Per-GPU bytes per token depend on the attention kind (MHA/GQA/MQA split over attention-TP ranks
and replicated when TP exceeds the KV heads; MLA latent replicated on every TP rank), the layers on
this rank, the KV dtype, and for hybrid models which layers keep full-context KV at all. Hybrid
linear-attention models (Gated DeltaNet, Mamba) also keep a fixed-size recurrent state per request
in their other layers; ``LinearState`` holds the config fields that size it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kvscope.core.errors import InputError

KV_DTYPE_BYTES = {
    "auto": None,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "bf16": 2,
    "fp16": 2,
    "float32": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "fp4_e2m1": 1,
    "int8": 1,
}


def dtype_bytes(name: str | None, weights_dtype: str | None = "bfloat16") -> int:
    """Element size of a KV dtype as an engine option or torch repr names it ('auto' → weights dtype)."""
    key = (name or "auto").replace("torch.", "").lower()
    size = KV_DTYPE_BYTES.get(key)
    if size is None:
        size = KV_DTYPE_BYTES.get((weights_dtype or "bfloat16").replace("torch.", "").lower()) or 2
    return size


@dataclass(frozen=True)
class LinearState:
    """One linear-attention / Mamba layer's recurrent state, in the config's terms (before any TP split).

    Two tensors per layer and request (vLLM ``MambaStateShapeCalculator``): a conv state of
    ``conv_channels × (conv_kernel − 1)`` and a temporal (SSM) state of ``heads × head_dim × state_dim``.
    kind "gdn" (Gated DeltaNet: Qwen3-Next, Qwen3.5/3.6): conv channels 2·k_heads·k_dim + v_heads·v_dim,
    temporal v_heads × v_dim × k_dim. kind "mamba2" (Nemotron-H, Granite-4, Falcon-H1): conv channels
    intermediate + 2·groups·state (groups padded up to the TP size), temporal heads × head_dim × state.
    kind "mamba1" (Jamba): conv intermediate × (kernel − 1), temporal intermediate × state.
    """

    kind: str
    conv_channels: int  # GDN: all channels; Mamba2: the intermediate size only (groups added per TP)
    conv_kernel: int
    heads: int
    head_dim: int
    state_dim: int
    groups: int = 0
    ssm_dtype: str | None = None  # declared by the config (mamba_ssm_dtype / mamba_ssm_cache_dtype)
    chunk_size: int | None = None  # mamba_chunk_size / chunk_size


@dataclass
class Architecture:
    """The fields of a config.json that decide KV size, normalised across model families."""

    name: str
    model_type: str
    num_layers: int
    attention: str  # "mha" | "mla"
    num_kv_heads: int | None = None
    head_dim: int | None = None
    v_head_dim: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    index_head_dim: int | None = None
    sliding_window: int | None = None
    full_attention_layers: int | None = None  # hybrid models: layers that keep full-context KV
    sliding_layers: int = 0
    linear_layers: int = 0  # hybrid models: linear-attention / Mamba layers (a recurrent state, no KV)
    linear_state: LinearState | None = None
    torch_dtype: str | None = None
    nextn_layers: int = 0
    max_position_embeddings: int | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if v not in (None, [], 0) or k == "num_layers"}
        if self.linear_state is not None:
            out["linear_state"] = {k: v for k, v in asdict(self.linear_state).items() if v not in (None, 0)}
        return out


def _first(cfg: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


def text_subconfig(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """The language model's own config where a multimodal wrapper nests it (text_config / llm_config /
    language_config), else None."""
    for key in ("text_config", "llm_config", "language_config"):
        sub = cfg.get(key)
        if isinstance(sub, dict) and sub.get("num_hidden_layers"):
            return sub
    return None


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs nest the language model under text_config / llm_config."""
    sub = text_subconfig(cfg)
    return cfg if sub is None else {**cfg, **sub}


def _layer_split(cfg: dict[str, Any], layers: int) -> tuple[int | None, int, int]:
    """(full-attention, sliding, linear) layers for hybrid configs; (None, 0, 0) for uniform ones."""
    types = cfg.get("layer_types")
    counts = types.get("counts") if isinstance(types, dict) else None
    if isinstance(counts, dict) and counts:  # the built-in catalog keeps layer_types as a summary of counts
        types = [name for name, n in counts.items() if isinstance(n, int) for _ in range(max(0, n))]
    if isinstance(types, list) and types:
        full = sum(1 for t in types if t in ("full_attention", "attention", "global"))
        sliding = sum(1 for t in types if "sliding" in str(t) or t == "local")
        if full + sliding == len(types) and sliding:
            return full, sliding, 0
        linear = sum(1 for t in types if "linear" in str(t) or "mamba" in str(t))
        if linear:
            return full, 0, linear
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and "M" in pattern:
        # Nemotron-H: M = Mamba2, * = attention, - = MLP, E = MoE (only * keeps KV, only M a state)
        return pattern.count("*"), 0, pattern.count("M")
    period, offset = cfg.get("attn_layer_period"), cfg.get("attn_layer_offset")
    if isinstance(period, int) and isinstance(offset, int) and period > 1:
        full = sum(1 for i in range(layers) if i % period == offset)  # Jamba: attention every period
        return full, 0, layers - full
    window_pattern = cfg.get("sliding_window_pattern")  # Gemma-3: every N-th layer keeps full context
    if isinstance(window_pattern, int) and window_pattern > 1 and cfg.get("sliding_window"):
        return layers // window_pattern, layers - layers // window_pattern, 0
    if cfg.get("model_type") == "gemma2" and cfg.get("sliding_window"):
        # Gemma-2's published config.json has neither layer_types nor a pattern: transformers' Gemma2Config makes
        # every other layer a sliding-window one, the first included ("sliding_attention" if (i + 1) % 2)
        return layers // 2, layers - layers // 2, 0
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 1:
        return layers // interval, 0, layers - layers // interval
    return None, 0, 0


def _int_field(cfg: dict[str, Any], *keys: str) -> int | None:
    value = _first(cfg, *keys)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def linear_state_from_config(cfg: dict[str, Any]) -> LinearState | None:
    """The recurrent-state fields of a hybrid config; None when the config lacks any of them."""
    k_heads, v_heads = _int_field(cfg, "linear_num_key_heads"), _int_field(cfg, "linear_num_value_heads")
    k_dim, v_dim = _int_field(cfg, "linear_key_head_dim"), _int_field(cfg, "linear_value_head_dim")
    kernel = _int_field(cfg, "linear_conv_kernel_dim")
    ssm = _first(cfg, "mamba_ssm_dtype", "mamba_ssm_cache_dtype")
    chunk = _int_field(cfg, "mamba_chunk_size", "chunk_size")
    if k_heads and v_heads and k_dim and v_dim and kernel:
        return LinearState("gdn", 2 * k_heads * k_dim + v_heads * v_dim, kernel, v_heads, v_dim, k_dim,
                           ssm_dtype=ssm, chunk_size=chunk)
    heads = _int_field(cfg, "mamba_num_heads", "mamba_n_heads")
    head_dim = _int_field(cfg, "mamba_head_dim", "mamba_d_head")
    state = _int_field(cfg, "ssm_state_size", "mamba_d_state")
    groups = _int_field(cfg, "n_groups", "mamba_n_groups")
    kernel = _int_field(cfg, "conv_kernel", "mamba_d_conv")
    hidden, expand = _int_field(cfg, "hidden_size"), _first(cfg, "mamba_expand")
    inner = _int_field(cfg, "mamba_d_ssm") or (int(expand * hidden) if isinstance(expand, (int, float)) and hidden
                                               else (heads * head_dim if heads and head_dim else None))
    if heads and head_dim and state and groups and kernel and inner:
        return LinearState("mamba2", inner, kernel, heads, head_dim, state, groups=groups, ssm_dtype=ssm,
                           chunk_size=chunk)
    if state and kernel and inner and cfg.get("attn_layer_period"):
        return LinearState("mamba1", inner, kernel, 1, inner, state, ssm_dtype=ssm, chunk_size=chunk)
    return None


def linear_state_elements(state: LinearState, tp_size: int, num_spec: int = 0) -> tuple[int, int]:
    """(conv, temporal) elements of one layer's state for one request on one TP rank.

    vLLM splits channels and heads over TP; Mamba2 pads its groups up to the TP size when they do not
    divide it; speculative decoding widens the conv window by the number of draft tokens.
    """
    tp = max(1, tp_size)
    width = state.conv_kernel - 1 + num_spec
    if state.kind == "mamba2":
        groups = state.groups if state.groups % tp == 0 else state.groups + tp - state.groups
        conv = (state.conv_channels + 2 * groups * state.state_dim) // tp
        return conv * width, state.heads // tp * state.head_dim * state.state_dim
    if state.kind == "mamba1":
        inner = state.conv_channels // tp
        return inner * (state.conv_kernel - 1), inner * state.state_dim
    return state.conv_channels // tp * width, state.heads // tp * state.head_dim * state.state_dim


# What a real config's size fields can hold: a larger (or negative, or non-integer) one is a broken or hostile
# file, and sizing with it would run away in time and memory (a loop per layer) or give negative bytes.
CONFIG_BOUNDS = {"num_hidden_layers": 100_000, "n_layer": 100_000, "num_layers": 100_000,
                 "num_attention_heads": 1 << 16, "n_head": 1 << 16, "num_key_value_heads": 1 << 16,
                 "num_kv_heads": 1 << 16, "n_head_kv": 1 << 16, "head_dim": 1 << 16, "v_head_dim": 1 << 16,
                 "hidden_size": 1 << 22, "intermediate_size": 1 << 24, "moe_intermediate_size": 1 << 24,
                 "vocab_size": 1 << 30, "kv_lora_rank": 1 << 16, "qk_rope_head_dim": 1 << 16,
                 "index_head_dim": 1 << 16, "num_experts": 1 << 20, "n_routed_experts": 1 << 20,
                 "num_local_experts": 1 << 20, "sliding_window": 1 << 40, "max_position_embeddings": 1 << 40,
                 "num_nextn_predict_layers": 1_000}
# fields a model may set to 0 (no MTP layers, no experts, no window, no latent)
ZERO_OK = frozenset({"num_nextn_predict_layers", "num_experts", "n_routed_experts", "num_local_experts", "kv_lora_rank",
                     "index_head_dim", "moe_intermediate_size", "sliding_window", "qk_rope_head_dim", "v_head_dim",
                     "intermediate_size"})


def check_config_sizes(cfg: dict[str, Any], where: str = "the config") -> None:
    """InputError for a size field that is not a whole number in (0, its bound] (null and absent are fine; the
    ZERO_OK fields may be 0, and sliding_window false, where a model has none)."""
    for part in (cfg, cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else None):
        if part is None:
            continue
        for key, bound in CONFIG_BOUNDS.items():
            value = part.get(key)
            if value is None or (key == "sliding_window" and value is False):
                continue
            low = 0 if key in ZERO_OK else 1
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= bound:
                shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "…"
                raise InputError(f"{where}: {key}={shown} is not a size a model can have (a whole number from {low} "
                                 f"to {bound:,})")


def architecture_from_config(cfg: dict[str, Any], name: str = "") -> Architecture | None:
    """Normalise an HF config; None when it lacks what KV sizing needs; InputError for an impossible size."""
    check_config_sizes(cfg, f"config of {name}" if name else "the config")
    cfg = _text_config(cfg)
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers")
    if not isinstance(layers, int) or layers <= 0:
        return None
    model_type = str(cfg.get("model_type") or "")
    kv_lora = cfg.get("kv_lora_rank")
    full, sliding, linear = _layer_split(cfg, layers)
    arch = Architecture(
        name=name or model_type,
        model_type=model_type,
        num_layers=layers,
        attention="mla" if kv_lora else "mha",
        torch_dtype=_first(cfg, "torch_dtype", "dtype"),
        sliding_window=cfg.get("sliding_window"),
        full_attention_layers=full,
        sliding_layers=sliding,
        linear_layers=linear,
        linear_state=linear_state_from_config(cfg) if linear else None,
        nextn_layers=int(_first(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers") or 0),
        max_position_embeddings=cfg.get("max_position_embeddings"),
    )
    if kv_lora:
        arch.kv_lora_rank = int(kv_lora)
        arch.qk_rope_head_dim = int(cfg.get("qk_rope_head_dim") or 64)
        arch.index_head_dim = cfg.get("index_head_dim")
        return arch
    heads = _first(cfg, "num_attention_heads", "n_head")
    kv_heads = _first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv")
    if cfg.get("multi_query"):
        kv_heads = 1
    kv_heads = kv_heads or heads
    head_dim = cfg.get("head_dim")
    hidden = cfg.get("hidden_size")
    if not head_dim and hidden and heads:
        head_dim = hidden // heads
    if not kv_heads or not head_dim:
        return None
    arch.num_kv_heads, arch.head_dim = int(kv_heads), int(head_dim)
    arch.v_head_dim = int(cfg.get("v_head_dim") or head_dim)
    return arch

