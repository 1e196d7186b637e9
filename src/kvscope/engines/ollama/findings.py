"""ollama findings, in ollama's own knobs: the runner's (llama.cpp's) findings named as ollama's options, and
what only ollama's scheduler shows: its offload estimate against what was available, why a GPU got no layer,
the slots its context is divided into, the GPUs it found, its per-load warnings (eviction, VRAM that did not
come back, another process), the largest num_ctx that keeps every layer on the GPU.

The knobs: num_ctx (a request's options, or OLLAMA_CONTEXT_LENGTH for every load), num_gpu (layers on the
GPU), num_batch, OLLAMA_NUM_PARALLEL, OLLAMA_KV_CACHE_TYPE (q8_0 / q4_0; needs OLLAMA_FLASH_ATTENTION=1),
OLLAMA_FLASH_ATTENTION, OLLAMA_GPU_OVERHEAD, OLLAMA_SCHED_SPREAD, OLLAMA_MAX_LOADED_MODELS.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kvscope.core.startup import Finding, Startup, Suggestion
from kvscope.engines.llamacpp import findings as runner
from kvscope.engines.llamacpp.findings import Flags, Host
from kvscope.engines.ollama.defaults import default_num_ctx

_LOG_DATE = re.compile(r"time=(20\d\d-\d\d-\d\d)T")  # a logfmt record's own stamp (journald's prefix has no year)

FLAGS = Flags(ctx="num_ctx", slots="OLLAMA_NUM_PARALLEL", gpu_layers="num_gpu", ubatch="num_batch",
              cache_types="OLLAMA_KV_CACHE_TYPE", cache_types_text="OLLAMA_KV_CACHE_TYPE", cache_k="OLLAMA_KV_CACHE_TYPE", cache_v="OLLAMA_KV_CACHE_TYPE",
              flash_attn="OLLAMA_FLASH_ATTENTION", no_kv_offload=None, tensor_split=None,
              runner="ollama's runner", cells_are="num_ctx × OLLAMA_NUM_PARALLEL")


def _int(s: Startup, key: str) -> int | None:
    return runner._int(s, key)


def _ollama_slots(s: Startup, n_ctx: int, slots: int, each: int) -> Finding:
    """ollama's runner: --ctx-size is num_ctx × OLLAMA_NUM_PARALLEL; each request gets num_ctx, and a prompt
    longer than that is truncated (the server says so)."""
    cut = next((w for w in s.warnings if w.get("code") == "input-truncated"), None)
    detail = (f"ollama started its runner with --ctx-size {n_ctx:,} for --parallel {slots}: {slots} × {each:,}. Each "
              f"request gets {each:,} tokens per slot (num_ctx); the {n_ctx:,} is the KV cache for all {slots} slots "
              f"together, which ollama sizes as num_ctx × OLLAMA_NUM_PARALLEL (a model's minimum context, when it has "
              "one, is applied per slot first).")
    if cut is not None and cut.get("prompt_tokens_high"):
        low, high = cut["prompt_tokens_low"], cut["prompt_tokens_high"]
        want = 1 << (high - 1).bit_length()
        detail += (f" The server truncated a prompt of ≈ {low:,}–{high:,} tokens to the {cut.get('n_ctx') or each:,} "
                   f"a slot holds (input truncated): raise num_ctx (OLLAMA_CONTEXT_LENGTH, or the request's options) to "
                   f"at least {high:,}; the KV cache grows to {want:,} × {slots} cells.")
        alt = Suggestion("OLLAMA_NUM_PARALLEL", slots, 1, note="fewer slots: the same memory then allows a larger num_ctx")
        sug = Suggestion("num_ctx", each, want, kv_tokens_after=want * slots,
                         note=f"holds the ≈ {high:,}-token prompt; KV memory grows {want / each:.0f}×", alternatives=[alt])
        title = f"A prompt was truncated: each of the {slots} slots holds {each:,} tokens ({slots} × {each:,} = --ctx-size {n_ctx:,})"
    else:
        detail += (" Lowering OLLAMA_NUM_PARALLEL shrinks the cache (and the memory it takes) by the slots removed; "
                   "raising num_ctx raises every slot's share.")
        sug = Suggestion("OLLAMA_NUM_PARALLEL", slots, 1,
                         note=f"KV cache {n_ctx:,} → {each:,} cells; one request at a time gets {each:,} tokens")
        title = f"--ctx-size {n_ctx:,} is {slots} slots × {each:,} tokens (OLLAMA_NUM_PARALLEL {slots})"
    return Finding("ollama-slots", "warning" if cut else "info", title, detail, sug)



def _smaller_context(s: Startup, done: int, total: int, per_layer: float) -> tuple[Suggestion, str] | None:
    """ollama's estimate: what a quarter of the context gives back. KV scales with num_ctx; the layers that fit
    scale with what each costs on the GPU (its weights plus its share of the KV cache), calibrated on the split
    ollama chose for the logged context."""
    kv, ctx = s.settings.get("ollama_memory_required_kv_gib"), _int(s, "ctx_size") or _int(s, "n_ctx")
    if not isinstance(kv, float) or not ctx or ctx < 4096 or kv <= 0:
        return None
    to = max(2048, 1 << (ctx // 4).bit_length() - 1)  # the power of two at or below a quarter of it
    if to >= ctx:
        return None
    kv_layer, kv_layer_to = kv / total, kv / total * to / ctx
    layers = min(total, int(done * (per_layer + kv_layer) // (per_layer + kv_layer_to)))
    text = (f" The {ctx:,}-token context (num_ctx) takes {kv:,.1f} GiB of KV cache; at {to:,} it takes "
            f"{kv * to / ctx:,.1f} GiB, room for ≈ {layers} of the {total} layers on the GPUs instead of {done}.")
    return Suggestion("num_ctx", ctx, to, note=f"≈ {layers}/{total} layers on the GPUs (+{layers - done}); shorter "
                      "prompts and answers per request"), text



OLLAMA_SAFE_MARGIN_GIB = 0.5  # what ollama's plan should leave free on a GPU: its graph estimates run low by this much


def _ollama_plan(s: Startup) -> tuple[float, float] | None:
    """(what ollama planned to put on the GPUs, what it counted as available), GiB, when its offload line says."""
    planned, available = s.settings.get("ollama_memory_required_partial_gib"), s.settings.get("ollama_memory_available_gib")
    if isinstance(planned, float) and isinstance(available, float) and planned > 0 and available > 0:
        return planned, available
    return None


def _fewer_layers(done: int, per_layer: float, missing_gib: float, why: str) -> Suggestion:
    """num_gpu lowered by the layers whose memory covers ``missing_gib``; OLLAMA_GPU_OVERHEAD as the other way."""
    fewer = max(1, math.ceil(missing_gib / per_layer)) if per_layer > 0 else 1
    reserve = math.ceil(missing_gib * 4) / 4  # in quarters of a GiB
    return Suggestion("num_gpu", done, max(0, done - fewer), note=f"{why}; each layer ≈ {per_layer:,.2f} GiB",
                      alternatives=[Suggestion("OLLAMA_GPU_OVERHEAD", 0, int(reserve * (1 << 30)),
                                               note=f"bytes ollama keeps free on each GPU ({reserve:g} GiB): its plan "
                                                    "then places fewer layers by itself")])


def _thin_plan(s: Startup, done: int, total: int, per_layer: float, layers_detail: str) -> Finding | None:
    """ollama planned almost all it counted as available: its graph and runtime estimates run low, so such a load
    is the one that fails with an out of memory (or slows down). The plan's margin is the answer: it leads, the
    partial offload's layer arithmetic (``layers_detail``) follows."""
    plan = _ollama_plan(s)
    if plan is None:
        return None
    planned, available = plan
    margin = available - planned
    if margin >= OLLAMA_SAFE_MARGIN_GIB:
        return None
    text = (f"ollama planned {planned:,.1f} GiB of the {available:,.1f} GiB available for these {done} layers: a "
            f"{margin:,.1f} GiB margin, and its compute-graph estimate is often low, so this load can run out of GPU "
            f"memory. Give it room: fewer layers on the GPU (num_gpu), or reserve memory with OLLAMA_GPU_OVERHEAD.")
    sug = _fewer_layers(done, per_layer, OLLAMA_SAFE_MARGIN_GIB - margin, "keeps about "
                        f"{OLLAMA_SAFE_MARGIN_GIB:g} GiB free for what the plan under-counts")
    return Finding("llamacpp-partial-offload", "warning",
                   f"ollama planned {planned:,.1f} of {available:,.1f} GiB for {done}/{total} layers: too little room "
                   "left", text + " " + layers_detail, sug)


def _ollama_compute_oom(s: Startup, size_mib: float | None) -> tuple[str, Suggestion | None]:
    """The runner's compute buffer did not fit after ollama placed its layers: ollama's graph estimate was low."""
    plan = _ollama_plan(s)
    done, total = _int(s, "n_gpu_layers_offloaded"), _int(s, "n_layers_offloadable")
    if plan is None or not size_mib:
        return "", None
    planned, available = plan
    graph = s.settings.get("ollama_memory_graph_partial_gib") or s.settings.get("ollama_memory_graph_full_gib") or 0.0
    missing = size_mib / 1024 - graph - (available - planned)
    text = (f" ollama planned {planned:,.1f} GiB of {available:,.1f} GiB on the GPU"
            + (f" for {done}/{total} layers" if done and total else "")
            + f", counting {graph * 1024:,.1f} MiB for the compute graph; the runner needed {size_mib:,.0f} MiB for it, "
            f"so ollama's estimate was too low by ≈ {max(0.0, missing):,.2f} GiB. Fewer layers on the GPU (num_gpu) or "
            "OLLAMA_GPU_OVERHEAD (memory ollama keeps free) makes its plan leave that room.")
    weights = s.settings.get("ollama_memory_weights_total_gib")
    if not (done and total and isinstance(weights, float) and missing > 0):
        return text, None
    return text, _fewer_layers(done, weights / total, missing, "frees what the compute buffer lacked")



def _ollama_devices(s: Startup) -> Finding | None:
    """ollama listed the GPUs it found: say so, and why it may still place a model on one of them."""
    found = _int(s, "ollama_gpus_found")
    if not found or found < 2:
        return None
    gpus = [r for r in s.ranks if r.total_gib is not None]
    sizes = ", ".join(f"{r.rank} {r.total_gib:.1f} GiB" + (f" ({r.pre_load_free_gib:.1f} available)"
                                                           if r.pre_load_free_gib is not None else "") for r in gpus)
    return Finding("ollama-gpus-found", "info", f"ollama found {found} GPUs: {sizes}",
                   f"{'Both' if found == 2 else f'All {found}'} GPUs were detected ({sizes}). When a model fits on a "
                   "single GPU, ollama loads it on one GPU by design (no cross-GPU traffic), so the others stay idle; "
                   "OLLAMA_SCHED_SPREAD=1 makes it spread every model over all of them. A model too large for one GPU "
                   "is split across them anyway.",
                   Suggestion("OLLAMA_SCHED_SPREAD", 0, 1, note="spread over all GPUs even when one would do"))



OLLAMA_MINIMUM_GIB = {"metal": 512 / 1024}  # discover/: a GPU's own minimum; CUDA and ROCm 457 MiB
OLLAMA_MINIMUM_DEFAULT_GIB = 457 / 1024


@dataclass(frozen=True)
class _PlacementRule:
    """How one ollama release decides whether a GPU gets any layer (llm/memory.go EstimateGPULayers): it must hold
    the compute graph, the GPU's minimum, two 'buffer' layers and, on the first GPU that qualifies, the projector."""

    releases: str
    largest_layer: bool  # the buffer layer is the largest layer group (0.7.0) rather than the first block
    projector_graph_on_first: bool  # the projector's graph counts on the first GPU, not only its weights


# oldest first; a log that names no release is judged by every rule that explains where its layers went
_PLACEMENT_RULES = (
    _PlacementRule("≤0.6.8", largest_layer=False, projector_graph_on_first=True),
    _PlacementRule("0.7.0", largest_layer=True, projector_graph_on_first=True),
    _PlacementRule("0.7.1+", largest_layer=False, projector_graph_on_first=False),
)


def _gib_setting(s: Startup, key: str) -> float:
    value = s.settings.get(key)
    return value if isinstance(value, float) else 0.0


def _placement_need(s: Startup, rule: _PlacementRule, first: bool) -> tuple[float, dict[str, float]]:
    """What a GPU must have free for ollama to place one layer on it, and its terms (GiB)."""
    blocks = max(1, (_int(s, "n_layers_offloadable") or 2) - 1)
    block = _gib_setting(s, "ollama_memory_weights_repeating_gib") / blocks
    buffer = max(block, _gib_setting(s, "ollama_memory_weights_nonrepeating_gib")) if rule.largest_layer else block
    buffer += _gib_setting(s, "ollama_memory_required_kv_gib") / blocks
    projector = 0.0
    if first:
        projector = _gib_setting(s, "ollama_projector_weights_gib") + (
            _gib_setting(s, "ollama_projector_graph_gib") if rule.projector_graph_on_first else 0.0)
    library = str(s.settings.get("ollama_library") or "cuda")
    terms = {"graph": max(_gib_setting(s, "ollama_memory_graph_partial_gib"), _gib_setting(s, "ollama_memory_graph_full_gib")),
             "minimum": OLLAMA_MINIMUM_GIB.get(library, OLLAMA_MINIMUM_DEFAULT_GIB), "layers": 2 * buffer,
             "projector": projector, "overhead": _gib_setting(s, "ollama_memory_gpu_overhead_gib")}
    return sum(terms.values()), terms


def _ollama_unused_gpus(s: Startup) -> Finding | None:
    """A GPU ollama's plan gave no layer: the room its placement rule wants there, against what it had free."""
    available = s.settings.get("ollama_memory_available_list_gib")
    if not isinstance(available, list) or not available or not _gib_setting(s, "ollama_memory_graph_partial_gib"):
        return None
    split = s.settings.get("ollama_layers_split")
    offloaded = _int(s, "n_gpu_layers_offloaded")
    counts = split if isinstance(split, list) and len(split) == len(available) else (
        [offloaded] if len(available) == 1 and offloaded is not None else None)
    if counts is None or all(c for c in counts):
        return None
    total = _int(s, "n_layers_offloadable")
    lines, needs = [], []
    shortest: tuple[float, dict[str, float]] | None = None  # the GPU that came closest: (its free, its terms)
    for i, (free, count) in enumerate(zip(available, counts, strict=True)):
        if count:
            continue
        first = not any(counts[:i])  # no earlier GPU took layers: this one would carry the projector
        fitting = []
        for rule in _PLACEMENT_RULES:
            need, terms = _placement_need(s, rule, first)
            if need > free:  # the rules that explain this GPU getting nothing
                fitting.append((rule, need, terms))
        if not fitting:
            continue
        rule, need, terms = fitting[-1]  # the newest rule that explains it
        needs.append(need)
        if shortest is None or need - free < sum(shortest[1].values()) - shortest[0]:
            shortest = (free, terms)
        parts = [f"the compute graph {terms['graph']:,.2f} GiB", f"the GPU's minimum {terms['minimum'] * 1024:,.0f} MiB",
                 f"two of its largest layers {terms['layers']:,.2f} GiB"]
        if terms["projector"]:
            parts.append(f"the vision projector {terms['projector']:,.2f} GiB (it goes on the first GPU)")
        if terms["overhead"]:
            parts.append(f"OLLAMA_GPU_OVERHEAD {terms['overhead']:,.2f} GiB")
        others = "".join(f"; {r.releases}'s rule wants ≈ {n:,.2f} GiB, also more" for r, n, _ in fitting[:-1])
        lines.append(f"GPU {i} has {free:,.1f} GiB available: too little for the minimum ollama's placement wants "
                     f"there before it puts one layer on it, ≈ {need:,.2f} GiB ({', '.join(parts)}, by ollama "
                     f"{rule.releases}'s rule{others}), so it got no layer.")
    if not lines:
        return None
    placed = sum(counts)
    head = f"{placed}/{total} layers on the GPUs" if total else f"{placed} layers on the GPUs"
    detail = (" ".join(lines) + " The graph and the layers' KV share shrink with a smaller num_ctx (or "
              "num_batch); the projector and the largest layer do not, so a GPU this small may never take a layer "
              "of this model.")
    worst = max(needs)
    sug = None
    if shortest is not None:
        smaller = _context_for_room(s, *shortest)
        if smaller is not None:
            sug, text = smaller
            detail += text
    return Finding("ollama-gpu-unused", "warning",
                   f"{head}: a GPU got none (it has less than the ≈ {worst:,.2f} GiB ollama wants there)", detail, sug)


def _context_for_room(s: Startup, free: float, terms: dict[str, float]) -> tuple[Suggestion, str] | None:
    """The num_ctx at which a GPU's placement minimum fits what it has free: the compute graph and the layers'
    KV share scale with the context (the graph is sized for a batch attending over all of it), the GPU's
    minimum, the projector, the layers' weights and OLLAMA_GPU_OVERHEAD do not."""
    ctx = _int(s, "ctx_size") or _int(s, "n_ctx")
    slots = _int(s, "n_slots") or 1
    assumed = ""
    if not ctx:  # the excerpt prints no context: the release's default (engines/ollama/defaults.py), said so
        default = _default_context(s)
        if default is not None:
            num_ctx, how = default
            ctx = num_ctx * slots
            assumed = f" num_ctx is not in the log: {num_ctx:,} is {how} (give --assume num_ctx=… if it was set)."
    blocks = max(1, (_int(s, "n_layers_offloadable") or 2) - 1)
    kv_share = 2 * _gib_setting(s, "ollama_memory_required_kv_gib") / blocks
    scaled = terms["graph"] + kv_share
    fixed = sum(terms.values()) - scaled
    if not ctx or scaled <= 0 or free <= fixed:
        return None
    each = ctx // slots
    fit = int(each * (free - fixed) / scaled)
    to = 1 << (fit.bit_length() - 1) if fit >= 1024 else 0  # a power of two at or below what fits
    if not to or to >= each:
        return None
    text = (f" At num_ctx {to:,} (from {each:,}) the graph and the layers' KV share shrink to ≈ "
            f"{scaled * to / each:,.2f} GiB, so the GPU's ≈ {fixed + scaled * to / each:,.2f} GiB minimum fits its "
            f"{free:,.1f} GiB (the graph does not shrink exactly in proportion: an estimate).{assumed}")
    return Suggestion("num_ctx", each, to, kv_tokens_after=to * slots,
                      note="the GPU that got no layer can then take some; each request holds fewer tokens"
                           + ("; from the release's default num_ctx" if assumed else "")), text


def _default_context(s: Startup) -> tuple[int, str] | None:
    """ollama's default num_ctx for the release that wrote this log (its version, else its date)."""
    date = next((m.group(1) for e in s.evidence[:50] if (m := _LOG_DATE.search(e.text))), None)
    totals = [r.total_gib for r in s.ranks if r.total_gib]
    return default_num_ctx(s.engine_version, date, sum(totals) if totals else None)


def _ollama_too_small(s: Startup) -> Finding | None:
    """ollama's scheduler skipped a GPU: the room it wants before it places one layer there (the compute graph,
    the GPU's minimum, two layers and, on the first GPU, the projector) is more than the GPU has free. The graph
    is sized for every parallel slot's context, so a first attempt with several slots can fail where one fits."""
    skipped = [w for w in s.warnings if w.get("code") == "ollama-gpu-too-small"]
    if not skipped:
        return None
    w = max(skipped, key=lambda x: x.get("available_gib") or 0.0)  # the roomiest GPU it still could not use
    graph = max(w.get("partial_offload_gib") or 0.0, w.get("full_offload_gib") or 0.0)
    need = (w.get("gpu_zero_overhead_gib") or 0.0) + graph + (w.get("minimum_gib") or 0.0) + 2 * (w.get("layer_size_gib") or 0.0)
    avail = w.get("available_gib")
    gpu = w.get("gpu") or "the GPU"
    if avail is None or not graph:
        return None
    detail = (f"ollama's compute-graph estimate alone is {graph:,.1f} GiB (partial_offload), more room than {gpu}'s "
              f"{avail:,.1f} GiB available; with the GPU minimum, two layers and the first GPU's projector it wants "
              f"{need:,.1f} GiB before it places one layer there, so no layer goes to that GPU.")
    slots, ctx = _int(s, "n_slots"), _int(s, "n_ctx_slot")
    sug = None
    if slots and slots > 1:
        per = f" of num_ctx {ctx:,}" if ctx else ""
        detail += (f" The graph and the context windows are sized for {slots} parallel slots{per} each: with "
                   "OLLAMA_NUM_PARALLEL unset ollama first tries several slots when VRAM looks ample, then retries "
                   "with one, which is the load that follows. Set OLLAMA_NUM_PARALLEL=1 to start there (or a smaller "
                   "num_ctx); more parallel slots only make it larger.")
        sug = Suggestion("OLLAMA_NUM_PARALLEL", slots, 1, note="one context window: the graph and KV cache of one slot")
    else:
        detail += " A smaller num_ctx (the graph and KV cache scale with it) or a smaller num_batch shrinks it."
    return Finding("ollama-gpu-too-small", "warning",
                   f"No layer fits on {gpu}: ollama wants {need:,.1f} GiB there, {avail:,.1f} GiB is available",
                   detail, sug)


class _Ollama(Host):
    """ollama's scheduler estimates, given to the runner's findings."""

    def slots(self, s: Startup, n_ctx: int, slots: int, each: int) -> Finding | None:
        return _ollama_slots(s, n_ctx, slots, each)

    def offload(self, s: Startup, done: int, total: int, per_layer: float, weights: float, detail: str,
                unused_gpu: Finding | None) -> tuple[Finding | None, str, Suggestion | None] | None:
        full, available = s.settings.get("ollama_memory_required_full_gib"), s.settings.get("ollama_memory_available_gib")
        if not (isinstance(full, float) and isinstance(available, float)):
            return None
        suggestion: Suggestion | None = Suggestion("num_gpu", done, total)
        fits = total - done if full <= available else 0
        if unused_gpu is not None:  # ollama's placement rule left a GPU empty: more layers cannot go there
            fits = 0
        detail += (f" ollama's own estimate: the whole model needs {full:,.1f} GiB on the GPUs, which have "
                   f"{available:,.1f} GiB available.")
        thin = _thin_plan(s, done, total, per_layer, detail)
        if thin is not None:
            return thin, detail, None
        if fits < total - done:
            detail += " It cannot all fit: a smaller quantization, more GPUs or a smaller num_ctx would."
            suggestion = None
            if weights + (s.settings.get("ollama_memory_graph_full_gib") or 0.0) >= available:
                detail += (f" The weights alone ({weights:,.1f} GiB) and the compute graph leave no room for all "
                           f"{total} layers in {available:,.1f} GiB at any context: a smaller model or a "
                           "lower-bit quantization is the way to run it entirely on the GPUs.")
            smaller = _smaller_context(s, done, total, per_layer)
            if smaller is not None:
                detail += smaller[1]
                suggestion = smaller[0]
        return None, detail, suggestion

    def compute_oom(self, s: Startup, size_mib: float | None) -> tuple[str, Suggestion | None]:
        return _ollama_compute_oom(s, size_mib)

    def weights_gib(self, s: Startup) -> float:
        return _gib_setting(s, "ollama_memory_weights_total_gib")

    def gpu_free_gib(self, s: Startup) -> float | None:
        available = s.settings.get("ollama_memory_available_gib")
        return float(available) if isinstance(available, (int, float)) else None


HOST = _Ollama()


def _skipped_arch(s: Startup) -> Finding | None:
    """A GPU the 2026 runner's discovery left out: the build's CUDA library has no code for its architecture, so
    the GPU is never offered to the scheduler (it appears in no memory line after discovery)."""
    skipped = [w for w in s.warnings if w.get("code") == "ollama-gpu-skipped-arch"]
    if not skipped:
        return None
    gpus = sorted({str(w.get("gpu") or "a GPU") for w in skipped})
    cc = next((w.get("compute_capability") for w in skipped if w.get("compute_capability")), None)
    archs = next((w.get("compiled_archs") for w in skipped if w.get("compiled_archs")), None) or []
    def cc_text(n: int) -> str:  # ollama prints compute capability × 100: 610 is 6.1, 1200 is 12.0
        return f"{n // 100}.{n % 100 // 10}"

    version = cc_text(cc) if isinstance(cc, int) else "its"
    oldest = f" (the oldest compiled is {cc_text(min(archs))})" if archs else ""
    return Finding("ollama-gpu-skipped-arch", "warning",
                   f"ollama left out {', '.join(gpus)}: compute capability {version} is not in this build's CUDA library",
                   f"At discovery ollama skipped {', '.join(gpus)}: this release's CUDA library was compiled for "
                   f"compute capabilities {', '.join(cc_text(a) for a in archs) or 'that exclude it'}{oldest}, not "
                   f"{version}, so the GPU is not used for any layer (memory is not the cause). An "
                   "ollama build whose CUDA library still includes that architecture (the CUDA 12 library of earlier "
                   "releases covers Pascal, cc 6.x) uses it again; the other GPUs keep working meanwhile.")


def findings(s: Startup) -> list[Finding]:
    unused_gpu = _ollama_unused_gpus(s)
    out = runner.findings(s, FLAGS, HOST, unused_gpu)
    out += [f for f in (_skipped_arch(s), _ollama_devices(s), _ollama_too_small(s)) if f is not None]
    return out
