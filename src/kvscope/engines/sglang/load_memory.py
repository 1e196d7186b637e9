"""What SGLang's weight load takes from the device: its tensors as the caching allocator books them.

SGLang's "Load weight end … mem usage=B GB" is free memory before minus after ``load_model``, read
after ``empty_cache`` (sgl-project/sglang model_executor/model_runner.py), so B holds the allocator's
segments: the parameters, the rope tables built at init, MLA's absorbed copies, and the room the
allocator cannot hand back (kvscope.model.allocator). This module lists the tensors one rank
allocates, in the order SGLang creates them and in the shapes it fuses them to (q/k/v into one
qkv_proj, gate/up into gate_up_proj, experts stacked per projection, DeepSeek's q_a and kv_a into
one fused_qkv_a_proj_with_mqa; each quantized weight as data plus scales), the load-time tensors
it frees again (compressed-tensors WNA16 MoE allocates g_idx and sort indices per layer, then
replaces them with empty ones), and what post-load processing adds; then replays them.

Measured against SGLang's own lines: Qwen3-30B-A3B TP4 14.31 (B), Kimi-K2.5 INT4 TP8 72.33.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from kvscope.engines.sglang.rules import SGLANG_WEIGHTS
from kvscope.model.allocator import replay
from kvscope.model.weights import (
    Parallel,
    QuantPlan,
    Tensor,
    is_deepseek_v4,
    mla_absorbed_parts,
    quant_plan,
    rank_tensors,
    rope_dims,
    tensor_parts,
    vision_allocations,
)

# (name pattern of a member, the fused module it joins): SGLang's merged linear layers
FUSED = [
    (re.compile(r"\.self_attn\.[qkv]_proj$"), "self_attn.qkv_proj"),
    (re.compile(r"\.(mlp|shared_experts?)\.(gate|up)_proj$"), r"\1.gate_up_proj"),
    (re.compile(r"\.experts\.0\.(gate|up)_proj$"), "experts.w13"),
    (re.compile(r"\.self_attn\.(q_a_proj|kv_a_proj_with_mqa)$"), "self_attn.fused_qkv_a_proj_with_mqa"),
]


@dataclass
class LoadMemory:
    """B as SGLang would print it, and what it is made of (bytes)."""

    reserved_bytes: int
    tensor_bytes: int  # everything the list books and keeps, at its nominal size
    rope_bytes: int  # the rope tables among them

    @property
    def allocator_slack_bytes(self) -> int:
        """Reserved beyond the tensors: segment rounding, and holes the freed load-time tensors leave."""
        return self.reserved_bytes - self.tensor_bytes


def _fused_key(module: str) -> str:
    """The merged module a member joins ('….self_attn.q_proj' → '….self_attn.qkv_proj'), else itself."""
    for rx, name in FUSED:
        m = rx.search(module)
        if m:
            return module[: m.start()] + "." + m.expand(name)
    return module


def _fuse(tensors: list[Tensor]) -> list[Tensor]:
    """Members of a merged layer become one tensor (rows added up), where the first member was."""
    out: dict[str, Tensor] = {}
    for t in tensors:
        key = _fused_key(t.module)
        prev = out.get(key)
        if prev is None:
            out[key] = t
        elif key != t.module and prev.in_f == t.in_f and prev.count == t.count:
            out[key] = replace(prev, out_f=prev.out_f + t.out_f, bias=prev.bias + t.bias)
        else:
            out[f"{t.module}#{len(out)}"] = t
    return list(out.values())


def _wna16_moe(plan: QuantPlan, t: Tensor) -> bool:
    """compressed-tensors WNA16 experts (SGLang's Marlin MoE): int4/int8 with group scales."""
    if t.kind != "expert" or plan.method != "compressed-tensors":
        return False
    scheme = plan.scheme_for(t.module, t.kind)
    return scheme.bits < 8 and bool(scheme.group)


def rope_events(cfg: dict[str, Any], version: tuple[int, ...] | None) -> list[tuple[str, str, int]]:
    """The rope table(s) SGLang computes on the GPU at init, with the temporaries that computation
    frees again (their holes shape where later weights land).

    One fp32 cos/sin cache of positions × rotary dim (one instance shared by all layers). DeepSeek's
    YaRN rope (MLA models with a YaRN rope_scaling: positions = original × factor) multiplies by
    mscale (one more temporary each) and, from 0.5.7, also keeps cos and sin of the doubled
    frequencies: three tables (layers/rotary_embedding.py).
    """
    dims = rope_dims(cfg)
    positions, rd, yarn = dims.positions, dims.rotary_dim, dims.yarn
    if positions <= 0 or rd <= 0:
        return []
    n, half, full = positions * 4, positions * rd // 2 * 4, positions * rd * 4
    ev: list[tuple[str, str, int]] = [("alloc", "inv", rd // 2 * 4), ("alloc", "t", n), ("alloc", "freqs", half)]
    for name in ("cos", "sin"):
        if yarn:
            ev += [("alloc", f"{name}_", half), ("alloc", name, half), ("free", f"{name}_", 0)]
        else:
            ev.append(("alloc", name, half))
    ev.append(("alloc", "cache", full))
    three = bool(yarn) and version is not None and tuple(version) >= (0, 5, 7)
    if three:
        ev.append(("alloc", "emb", full))
        for name in ("cos_total", "sin_total"):
            ev += [("alloc", f"{name}_", full), ("alloc", name, full), ("free", f"{name}_", 0)]
    ev += [("free", name, 0) for name in ("inv", "t", "freqs", "cos", "sin") + (("emb",) if three else ())]
    return ev


def _kept(events: list[tuple[str, Any, int]]) -> list[tuple[Any, int]]:
    """(key, bytes) of every allocation the sequence never frees."""
    freed = {key for op, key, _ in events if op == "free"}
    return [(key, nbytes) for op, key, nbytes in events if op == "alloc" and key not in freed]


def rope_table_bytes(cfg: dict[str, Any], version: tuple[int, ...] | None) -> int:
    """What the rope tables keep once built (the temporaries freed)."""
    return sum(nbytes for _, nbytes in _kept(rope_events(cfg, version)))


def _layer_of(module: str) -> str:
    m = re.search(r"\.layers\.(\d+)\.", module)
    return m.group(1) if m else module


def _sglang_order(tensors: list[Tensor]) -> list[Tensor]:
    """SGLang's MoE layer creates its router (gate) before the experts; everything else in order."""
    out: list[Tensor] = []
    held: list[Tensor] = []  # a layer's experts, until its router shows where they go
    for t in tensors:
        if t.kind == "expert":
            held.append(t)
        elif held and t.kind == "router" and _layer_of(t.module) == _layer_of(held[0].module):
            out += [t, *held]
            held = []
        else:
            out += [*held, t]
            held = []
    return out + held


def sglang_load_events(cfg: dict[str, Any], par: Parallel, plan: QuantPlan, version: tuple[int, ...] | None,
                       dtype_bytes: int = 2, stage: int = 0) -> list[tuple[str, int | str, int]]:
    """Allocations and frees of one rank's load, in SGLang's order: the vision tower, then the language
    model module by module (the rope tables after the first attention's layers; a MoE layer's router,
    then its experts' packed weights, then their scales), then what post-load processing frees
    (WNA16 g_idx), passes through (Marlin repack copies) and adds (MLA's w_kc / w_vc)."""
    events: list[tuple[str, int | str, int]] = []
    n = 0

    def book(nbytes: int) -> int:
        nonlocal n
        n += 1
        events.append(("alloc", n, nbytes))
        return n

    for nbytes in vision_allocations(cfg, par, SGLANG_WEIGHTS):
        book(nbytes)
    transients: list[int] = []
    repacked: list[int] = []
    roped = attended = False
    tensors = _sglang_order(_fuse(rank_tensors(cfg, par, stage)))
    i = 0
    while i < len(tensors):
        t = tensors[i]
        if attended and not roped and t.component not in ("attention", "norms"):
            roped = True  # the attention module builds its rotary embedding after its own layers
            for op, key, nbytes in rope_events(cfg, version):
                events.append((op, f"rope.{key}", nbytes))
        attended = attended or t.component == "attention"
        if t.kind == "expert":  # all experts of the layer: every data part, then every scale part
            group = [t]
            while i + 1 < len(tensors) and tensors[i + 1].kind == "expert":
                i += 1
                group.append(tensors[i])
            parts = [tensor_parts(g, plan, dtype_bytes) for g in group]
            for k in range(max(len(p) for p in parts)):
                for g, p in zip(group, parts, strict=True):
                    if k < len(p):
                        book(p[k])
                        if _wna16_moe(plan, g):
                            repacked.append(p[k])
            for g in group:
                if _wna16_moe(plan, g):
                    transients += [book(g.count * g.in_f * 4) for _ in range(2)]
        else:
            for nbytes in tensor_parts(t, plan, dtype_bytes):
                book(nbytes)
        i += 1
    events += [("free", key, 0) for key in transients]
    for nbytes in repacked:  # Marlin repack: a same-size temporary, copied back into the weight's storage
        copy = book(nbytes)
        events.append(("free", copy, 0))
    for nbytes in mla_absorbed_parts(cfg, par, plan, SGLANG_WEIGHTS, stage):
        book(nbytes)
    return events


def sglang_load_memory(cfg: dict[str, Any], par: Parallel, plan: QuantPlan, version: tuple[int, ...] | None,
                       dtype_bytes: int = 2, stage: int = 0) -> LoadMemory | None:
    """B for one rank; None for models whose load is not listed (DeepSeek-V4's own layers)."""
    if is_deepseek_v4(cfg):
        return None
    events = sglang_load_events(cfg, par, plan, version, dtype_bytes, stage)
    return _load_memory(events)



def _load_memory(events: list[tuple[str, int | str, int]]) -> LoadMemory:
    """B of a replayed load: the allocator's segments, the tensors it keeps, the rope tables among them."""
    kept = _kept(events)
    rope = sum(nbytes for key, nbytes in kept if str(key).startswith("rope."))
    return LoadMemory(replay(events), sum(nbytes for _, nbytes in kept), rope)


def is_eagle3_draft(cfg: dict[str, Any]) -> bool:
    """An EAGLE-3 head's config (SGLang's LlamaForCausalLMEagle3 and its kin)."""
    return any("eagle3" in str(a).lower() for a in cfg.get("architectures") or [])


def sglang_eagle3_draft_load(cfg: dict[str, Any], par: Parallel, version: tuple[int, ...] | None,
                             dtype_bytes: int = 2) -> LoadMemory:
    """An EAGLE-3 draft's load as SGLang builds it (models/llama_eagle3.py), which is what the static budget pays
    for it from 0.5.14: its own embedding (the target's replaces it only after the pools are sized), fc (aux hidden
    states × hidden → hidden, three by default), each decoder layer built by the parent class and then given a new
    qkv_proj (2 × hidden inputs on the first layer) and a new mlp, the rope table, a draft-vocab lm_head (the
    embedding when tied).

    The parent's qkv_proj and mlp are not freed: every parameter of SGLang's linear layers carries its layer's bound
    ``weight_loader`` (layers/linear.py), a reference cycle that only the cyclic collector breaks, and none runs
    before the measurement. Truth run s16 (Llama-3.1-8B's EAGLE-3 head): 2.21 GiB logged; replayed with them kept
    2.21, freed 1.83.
    """
    plan = quant_plan(cfg, None)
    h = int(cfg["hidden_size"])
    hidden_in = int(cfg.get("target_hidden_size") or h)
    eagle = cfg.get("eagle_config")
    layer_ids = eagle.get("eagle_aux_hidden_state_layer_ids") if isinstance(eagle, dict) else None
    aux = int(cfg.get("num_aux_hidden_states") or len(layer_ids or []) or 3)
    events: list[tuple[str, int | str, int]] = []
    n = 0

    def book(t: Tensor) -> None:
        nonlocal n
        for nbytes in tensor_parts(t, plan, dtype_bytes):
            n += 1
            events.append(("alloc", n, nbytes))

    roped = False
    layer: list[Tensor] = []

    def rebuild(layer: list[Tensor]) -> None:
        """The subclass's own qkv_proj and mlp, after the parent's (which stay)."""
        if not layer:
            return
        first = _layer_of(layer[0].module) == "0"
        qkv = next((x for x in layer if x.component == "attention"), None)  # the fused qkv_proj comes first
        if qkv is not None:
            book(replace(qkv, in_f=qkv.in_f * (2 if first else 1)))
        for t in layer:
            if t.component == "mlp":
                book(t)

    for t in _fuse(rank_tensors(cfg, par)):
        if layer and _layer_of(t.module) != _layer_of(layer[0].module):
            rebuild(layer)
            layer = []
        if t.component == "lm_head":
            draft_vocab = int(cfg.get("draft_vocab_size") or t.out_f * par.tp)
            book(replace(t, out_f=-(-draft_vocab // par.tp)))
            continue
        if layer and not roped and t.component not in ("attention", "norms"):
            roped = True  # the attention module builds its rotary embedding after its own layers
            events += [(op, f"rope.{key}", nbytes) for op, key, nbytes in rope_events(cfg, version)]
        book(t)
        if t.component == "embeddings":
            book(Tensor("fc", "model.fc", "linear", h, hidden_in * aux))
        elif ".layers." in t.module:
            layer.append(t)
    rebuild(layer)
    return _load_memory(events)
