"""Speculative decoding in a vLLM plan: the drafter's KV layers and weights, before any log exists.

vLLM V1 loads the drafter inside ``GPUModelRunner.load_model`` (``self.drafter.load_model``), so
its weights are part of "Model loading took" and come out of the KV budget; its attention layers
get KV specs next to the target's, so every block id also pays a page in each draft layer. Which
layers a method adds is ``rules.draft_kv_layers`` — the rule explain uses to reproduce the §6.1
log (Llama-3.1-8B + EAGLE: 33 layers) — so plan, explain and whatif share one implementation.

What an EAGLE drafter's weights and profile cost, from vLLM 0.26.0's source (measured on truth run 035):

* Sharing is decided by the checkpoint's tensor names (``models/utils.process_eagle_weight`` sets
  ``has_own_embed_tokens`` / ``has_own_lm_head`` per loaded tensor; ``spec_decode/eagle/utils._should_share``
  shares when the flag is unset or the copy equals the target's). A published EAGLE-3 head brings its own
  draft-vocab lm_head and no embedding, so it keeps the head. Dummy weights never call ``load_weights``, so
  both flags stay unset and both tensors are shared: run 035's drafter added 0.55 GiB, one decoder layer (its
  qkv_proj reads 2 × hidden: the embedding and the hidden state concatenated) plus fc (3 × hidden → hidden).
* The V2 runner's profile (``_dummy_run``) keeps the target's auxiliary hidden states (three layers for
  EAGLE-3), its last hidden state and the fc output alive while the drafter's prefill runs over the same
  max_num_batched_tokens; the draft layer's input residual is a view of a persistent buffer. Its peak is the
  draft layer's own plus (aux + 1 + 1 − 1) × tokens × hidden values: 0.50 GiB for Llama-3.1-8B at 16,384
  tokens, against 0.54 GiB measured (1.78 → 2.32 GiB; the 0.04 left is not accounted for).
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass, field
from typing import Any

from kvscope.core.errors import InputError
from kvscope.engines.vllm import rules as v_rules
from kvscope.engines.vllm.rules import VLLM_WEIGHTS
from kvscope.model.arch import Architecture, architecture_from_config
from kvscope.model.weights import (
    GIB,
    ModelConfig,
    Parallel,
    decoder_layer_bytes,
    estimate_weights,
    load_model_config,
)

SHORT_KEYS = (("speculative_method", "method"), ("speculative_algorithm", "method"), ("speculative_model", "model"),
              ("num_speculative_tokens", "num_speculative_tokens"))
METHOD_ALIASES = {"nextn": "mtp", "eagle-3": "eagle3", "[ngram]": "ngram"}
OFF = ("", "none", "off", "false")
EAGLE_DROPPED_KEYS = ("quantization_config", "n_routed_experts", "num_experts", "num_local_experts", "layer_types",
                      "linear_num_key_heads")
EAGLE3_DRAFT_VOCAB = 32000  # the reduced LM-head vocabulary of published EAGLE-3 heads (draft_vocab_size)


@dataclass
class VllmDraft:
    """The drafter as the plan counts it: KV layers (and their shape), weights, draft tokens."""

    method: str
    model: str | None
    num_speculative_tokens: int
    tokens_from: str
    kv_layers: int
    kv_arch: Architecture  # whose KV shape the draft layers have (the draft's config, else the target's)
    layers_from: str
    weights_bytes: int
    weights_from: str
    notes: list[str] = field(default_factory=list)
    cfg: dict[str, Any] | None = None  # the draft's own config.json, when known

    @property
    def weights_gib(self) -> float:
        return self.weights_bytes / GIB

    def row_bytes(self, kv_bytes: int, tp: int) -> int:
        """KV bytes of one token in one draft layer on one rank (the draft inherits the KV dtype)."""
        return v_rules.page_size(self.kv_arch, kv_bytes, tp).bytes_per_token_per_layer if self.kv_layers else 0

    def target_layer_equivalent(self, target_row: int, kv_bytes: int, tp: int) -> int:
        """Draft layers in target-layer units, for layouts that need one page size (hybrid groups):
        exact when the shapes match (EAGLE on its own target, MTP), rounded up otherwise."""
        row = self.row_bytes(kv_bytes, tp)
        if not self.kv_layers or row == target_row or target_row <= 0:
            return self.kv_layers
        return math.ceil(self.kv_layers * row / target_row)

    def as_dict(self, kv_bytes: int, tp: int) -> dict[str, Any]:
        row = self.row_bytes(kv_bytes, tp)
        return {"method": self.method, "model": self.model, "num_speculative_tokens": self.num_speculative_tokens,
                "num_speculative_tokens_from": self.tokens_from, "draft_kv_layers": self.kv_layers,
                "draft_kv_layers_from": self.layers_from, "draft_bytes_per_token_per_layer": row,
                "draft_bytes_per_token": row * self.kv_layers, "draft_weights_gib": self.weights_gib,
                "draft_weights_from": self.weights_from}


def _parse_spec(raw: Any) -> dict[str, Any]:
    """--set speculative_config='{"method": "eagle", …}' as vLLM takes it: a dict, JSON or a Python literal."""
    if raw is None or isinstance(raw, dict):
        return dict(raw or {})
    text = str(raw).strip()
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(text)
        except (ValueError, SyntaxError):
            continue
        if isinstance(value, dict):
            return value
    if text.lower() in OFF:
        return {}
    raise InputError(f"speculative_config must be a JSON object such as "
                     f"'{{\"method\": \"eagle\", \"num_speculative_tokens\": 3}}', got {raw!r}")


def _infer_method(model: str, draft: ModelConfig | None) -> str:
    """vLLM's guess from the draft model's name when no method is given (SpeculativeConfig.__post_init__)."""
    name = model.lower()
    archs = " ".join(draft.cfg.get("architectures") or []).lower() if draft else ""
    if "eagle3" in name or "eagle-3" in name or "eagle3" in archs:
        return "eagle3"
    if "eagle" in name or "eagle" in archs:
        return "eagle"
    if name == "[ngram]":
        return "ngram"
    return "draft_model"


def spec_request(settings: dict[str, Any]) -> dict[str, Any] | None:
    """The speculative_config the operator asked for (its short keys folded in), or None."""
    spec = _parse_spec(settings.get("speculative_config"))
    for short, key in SHORT_KEYS:
        if settings.get(short) is not None:
            spec.setdefault(key, settings[short])
    method = str(spec.get("method") or "").strip().lower()
    if not spec or (method in OFF and not spec.get("model")):
        return None
    spec["method"] = METHOD_ALIASES.get(method, method)
    return spec


def _draft_config(model: str | None, method: str) -> ModelConfig | None:
    """The draft's config when it is a local checkpoint or in the catalog; an EAGLE head only when the
    config is one (a name like 'Llama-3.1-8B-Instruct-speculator.eagle3' must not resolve to the target)."""
    if not model or method in v_rules.NO_KV_DRAFT_METHODS or v_rules.is_mtp(method):
        return None
    mc = load_model_config(model)
    if mc is None or not method.startswith("eagle") or mc.local_dir is not None:
        return mc
    archs = " ".join(mc.cfg.get("architectures") or []).lower()
    return mc if "eagle" in archs or int(mc.cfg.get("num_hidden_layers") or 99) <= 2 else None


def resolve_vllm_draft(mc: ModelConfig, arch: Architecture, settings: dict[str, Any], par: Parallel) -> VllmDraft | None:
    """The drafter of this plan (None without speculative decoding)."""
    spec = spec_request(settings)
    if spec is None:
        return None
    model = str(spec["model"]) if spec.get("model") else None
    draft_mc = _draft_config(model, spec["method"])
    method = spec["method"] or _infer_method(model or "", draft_mc)
    draft_arch = architecture_from_config(draft_mc.cfg, name=draft_mc.name) if draft_mc else None
    notes: list[str] = []
    layers, layers_from = _draft_layers(method, arch, draft_arch, settings, notes)
    tokens, tokens_from = _draft_tokens(spec, method, arch)
    weights, weights_from = _draft_weights(method, mc, draft_mc, arch, layers, settings, par)
    if method.startswith("eagle") and draft_arch is None and layers:
        notes.append(f"EAGLE head assumed to be {layers} decoder layer(s) with the target's KV shape "
                     f"({arch.num_kv_heads} KV heads × {arch.head_dim}); give speculative_config's model as a local "
                     "checkpoint or a catalog id to size it from its config")
    if layers:
        notes.append(f"speculative decoding ({method}): {layers} draft KV layer(s) share every block id with the "
                     f"target's; draft weights {weights / GIB:.2f} GiB ({weights_from}) are loaded before the memory "
                     "profile, so they come out of the KV budget")
    else:
        notes.append(f"speculative decoding ({method}): no draft attention layers, so no draft KV; weights "
                     f"{weights / GIB:.2f} GiB ({weights_from})")
    return VllmDraft(method, model, tokens, tokens_from, layers, draft_arch or arch, layers_from, weights,
                     weights_from, notes, draft_mc.cfg if draft_mc else None)


def _draft_layers(method: str, arch: Architecture, draft_arch: Architecture | None, settings: dict[str, Any],
                  notes: list[str]) -> tuple[int, str]:
    """How many KV layers the drafter adds, and where that number comes from."""
    given = settings.get("draft_layers")
    if given is not None:
        return int(given), "given (--set draft_layers)"
    if draft_arch is not None and method not in v_rules.NO_KV_DRAFT_METHODS:
        return draft_arch.num_layers, f"draft config ({draft_arch.name})"
    n = v_rules.draft_kv_layers(method, arch.nextn_layers)
    if n is None:
        raise InputError(f"speculative method {method!r}: the draft model's config is needed to count its KV layers "
                         "(give speculative_config's model as a local checkpoint or catalog id, or --set draft_layers=N)")
    if v_rules.is_mtp(method) and not n:
        notes.append("the model's config has no num_nextn_predict_layers / mtp_num_hidden_layers: vLLM would refuse "
                     "MTP for it")
    how = ("model config (num_nextn_predict_layers / mtp_num_hidden_layers)" if v_rules.is_mtp(method)
           else "none for this method" if not n else "assumed (published EAGLE heads are one decoder layer)")
    return n, how


def _draft_tokens(spec: dict[str, Any], method: str, arch: Architecture) -> tuple[int, str]:
    """num_speculative_tokens: given, else MTP's n_predict, else 1 (it only shapes a Mamba hybrid's state)."""
    given = spec.get("num_speculative_tokens") or spec.get("num_spec_tokens")
    if given is not None:
        return int(given), "given"
    if v_rules.is_mtp(method) and arch.nextn_layers:
        return arch.nextn_layers, "default (n_predict = MTP layers)"
    return 1, "assumed (vLLM needs it for this method)"


def _draft_weights(method: str, mc: ModelConfig, draft_mc: ModelConfig | None, arch: Architecture, layers: int,
                   settings: dict[str, Any], par: Parallel) -> tuple[int, str]:
    """Draft weight bytes per rank: given, else its config, else layers shaped like the target's."""
    given = settings.get("draft_weights_gib")
    if given is not None:
        return int(float(given) * GIB), "given (--set draft_weights_gib)"
    if method in v_rules.NO_KV_DRAFT_METHODS:
        return 0, "none (no draft network)" if method != "medusa" else "not counted (Medusa heads: give draft_weights_gib)"
    h = int(mc.cfg["hidden_size"])
    if draft_mc is not None:
        return _config_draft_weights(method, draft_mc, par, h, _dummy(settings))
    # an MTP layer is shaped like the target's last (full-attention, MoE) layer; an EAGLE head is a dense,
    # unquantized decoder layer of the target's width (a MoE target's head has no experts)
    cfg = mc.cfg if v_rules.is_mtp(method) else {k: v for k, v in mc.cfg.items() if k not in EAGLE_DROPPED_KEYS}
    index = int(mc.cfg["num_hidden_layers"]) - 1 if v_rules.is_mtp(method) else 0
    body = layers * decoder_layer_bytes(cfg, index, par) + (_eagle3_qkv_extra(cfg, par) if method == "eagle3" and layers else 0)
    fc = (3 if method == "eagle3" else 2) * h * h * 2 // (par.tp if method.startswith("eagle") else 1)
    dummy = _dummy(settings)
    head = EAGLE3_DRAFT_VOCAB * h * 2 // par.tp if method == "eagle3" and not dummy else 0
    what = "MTP layer(s) of the model's shape + eh_proj" if v_rules.is_mtp(method) else \
        "assumed: target-shaped bf16 decoder layer(s) + fc" + (" + 32k-vocab lm_head" if head else "")
    shared = "embedding and lm_head shared with the target" + (" (dummy weights bring no own copy)" if dummy else "")
    return body + fc + head, f"{what}; {shared}"


def _dummy(settings: dict[str, Any]) -> bool:
    """load_format dummy: no checkpoint tensor is loaded, so an EAGLE draft owns neither embedding nor lm_head."""
    return str(settings.get("load_format") or "").strip().lower() == "dummy"


def _eagle3_qkv_extra(cfg: dict[str, Any], par: Parallel) -> int:
    """Bytes the first EAGLE-3 layer's qkv_proj holds beyond a target layer's: it reads the embedding and the hidden
    state concatenated (2 × hidden inputs, llama_eagle3.LlamaDecoderLayer), one more hidden of inputs."""
    h = int(cfg["hidden_size"])
    heads = int(cfg.get("num_attention_heads") or 1)
    head_dim = int(cfg.get("head_dim") or h // heads)
    kv = int(cfg.get("num_key_value_heads") or heads)
    return h * (heads + 2 * kv) * head_dim * 2 // par.tp


def _config_draft_weights(method: str, draft_mc: ModelConfig, par: Parallel, target_h: int,
                          dummy: bool = False) -> tuple[int, str]:
    """A draft whose config is known: its estimate, less the embedding vLLM shares with the target
    (same shape, PP 1) and, for EAGLE-1, the lm_head it borrows; EAGLE-3 keeps its own draft-vocab head
    unless the weights are dummy (no checkpoint tensor names it, so vLLM shares the target's)."""
    est = estimate_weights(draft_mc, par, rules=VLLM_WEIGHTS)
    parts = dict(est.by_component)
    h = int(draft_mc.cfg["hidden_size"])
    shared = []
    if method.startswith("eagle") and par.pp == 1 and h == target_h:
        parts.pop("embeddings", None)
        shared.append("embedding")
    if method == "eagle" or (method == "eagle3" and dummy):
        parts.pop("lm_head", None)
        shared.append("lm_head")
    elif method == "eagle3" and "lm_head" in parts:
        vocab = int(draft_mc.cfg.get("draft_vocab_size") or draft_mc.cfg.get("vocab_size") or EAGLE3_DRAFT_VOCAB)
        parts["lm_head"] = vocab * h * 2 // par.tp
    if method.startswith("eagle"):
        parts["fc"] = (3 if method == "eagle3" else 2) * h * h * 2 // par.tp
    if method == "eagle3":
        parts["qkv of 2 × hidden"] = _eagle3_qkv_extra(draft_mc.cfg, par)
    how = f"draft config ({draft_mc.name})" + (f"; {' and '.join(shared)} shared with the target" if shared else "")
    return sum(parts.values()), how

