"""KV bytes per token from an HF ``config.json``: the architecture side of every capacity question.

Per-GPU bytes per token depend on the attention kind (MHA/GQA/MQA split over attention-TP ranks
and replicated when TP exceeds the KV heads; MLA latent replicated on every TP rank), the layers on
this rank, the KV dtype, and for hybrid models which layers keep full-context KV at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    torch_dtype: str | None = None
    nextn_layers: int = 0
    max_position_embeddings: int | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, [], 0) or k == "num_layers"}


def _first(cfg: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs nest the language model under text_config / llm_config."""
    for key in ("text_config", "llm_config", "language_config"):
        sub = cfg.get(key)
        if isinstance(sub, dict) and sub.get("num_hidden_layers"):
            merged = dict(cfg)
            merged.update(sub)
            return merged
    return cfg


def _layer_split(cfg: dict[str, Any], layers: int) -> tuple[int | None, int]:
    """(full-attention layers, sliding layers) for hybrid configs; (None, 0) for uniform ones."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        full = sum(1 for t in types if t in ("full_attention", "attention", "global"))
        sliding = sum(1 for t in types if "sliding" in str(t) or t == "local")
        if full + sliding == len(types) and sliding:
            return full, sliding
        linear = sum(1 for t in types if "linear" in str(t) or "mamba" in str(t))
        if linear:
            return full, 0
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 1:
        return layers // interval, 0
    return None, 0


def architecture_from_config(cfg: dict[str, Any], name: str = "") -> Architecture | None:
    """Normalise an HF config; None when it lacks what KV sizing needs."""
    cfg = _text_config(cfg)
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers")
    if not isinstance(layers, int) or layers <= 0:
        return None
    model_type = str(cfg.get("model_type") or "")
    kv_lora = cfg.get("kv_lora_rank")
    full, sliding = _layer_split(cfg, layers)
    arch = Architecture(
        name=name or model_type,
        model_type=model_type,
        num_layers=layers,
        attention="mla" if kv_lora else "mha",
        torch_dtype=_first(cfg, "torch_dtype", "dtype"),
        sliding_window=cfg.get("sliding_window"),
        full_attention_layers=full,
        sliding_layers=sliding,
        nextn_layers=int(cfg.get("num_nextn_predict_layers") or 0),
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


def kv_heads_per_rank(arch: Architecture, attn_tp: int) -> int:
    """SGLang/vLLM rule: heads split over attention-TP, at least one (replicated when TP > heads)."""
    return max(1, (arch.num_kv_heads or 1) // max(1, attn_tp))


def mla_row_bytes(arch: Architecture, kv_bytes: int) -> int:
    """One MLA layer's latent row: (kv_lora_rank + rope dim) × element size. Not split by TP."""
    return ((arch.kv_lora_rank or 0) + (arch.qk_rope_head_dim or 0)) * kv_bytes
