"""How close is ``kvscope plan`` (no log) to what real servers logged?

For every real log in tests/fixtures/logs whose model, GPU and parallelism are known from its
meta.json, run ``plan`` with only launch facts — never a number the log printed — and compare the
predicted KV tokens per GPU with the logged ones. Prints one row per case, the mean absolute %
error, whether the logged value falls inside the range plan states (its unlogged inputs' spreads,
kvscope.model.spread), and the cases that could not be planned with the reason.

    python benchmarks/plan_accuracy.py [--json] [--cases tests/fixtures/logs]

Launch facts come from meta.json (``model``, ``gpu``, ``tp``/``num_gpus``, ``engine_version``,
``launch_flags_known``, ``settings``, ``launch_command``) and, where meta.json states them only in
its prose ``notes``, from CASE_FACTS below (each with the sentence it comes from), and from vLLM's
``non-default args: {…}`` line where the log has one: the engine's echo of the launch flags, read
only for the flags in LOGGED_ARGS (a flag it lacks was at the release default), and the utilization
its memory-profiling lines repeat. A release
version missing from meta.json is taken as the newest release built before the log's own date
(SGLang logs carry full dates); that is "the version that was current", not a number from the log.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kvscope.analysis.plan import PlanRequest, plan  # noqa: E402
from kvscope.core.errors import InputError  # noqa: E402
from kvscope.engines.sglang import eras as sg_eras  # noqa: E402
from kvscope.model.overheads import resolve_gpu  # noqa: E402
from kvscope.model.weights import load_model_config  # noqa: E402

# Facts stated in a case's meta.json notes (prose), not in its structured fields.
CASE_FACTS: dict[str, dict[str, Any]] = {
    "sglang/026-deepseek-v32-exp-8xb200-dp8-with-indexer-fix": {
        "engine_version": "0.5.4",
        "why": "notes: the PR branch ('With this PR', indexer KV in the size estimate), a main-branch build of "
               "2025-10-07 between 0.5.2 and 0.5.4; modelled with the 0.5.4 rules that shipped the PR",
    },
    "sglang/027-deepseek-v32-exp-8xb200-dp8-main-branch": {
        "engine_version": "0.5.3", "settings": {"mem_fraction_static": 0.8},
        "why": "notes: \"'With main (hardcoded mem-fraction-static=0.8)'\"; main before the indexer fix (0.5.3 rules)",
    },
    "vllm/002-llama31-8b-3090-v0-20k": {
        "engine_version": "0.6.4", "settings": {"max_model_len": 20000},
        "why": "notes: \"(--max-model-len 20000) … V0 'Memory profiling results:' single-line format (approx. v0.6.4)\"",
    },
    "vllm/003-llama31-8b-3090-v0-29k-too-long": {
        "engine_version": "0.6.4", "settings": {"max_model_len": 29000},
        "why": "notes: \"(--max-model-len 29000) … V0 single-line 'Memory profiling results:' format\"",
    },
    "vllm/025-llama31-8b-l40s-v1-085": {
        "settings": {"max_model_len": 32768},
        "why": "notes: \"max_model_len 32768 (user-set)\"",
    },
    "vllm/012-qwen3-235b-a22b-fp8-4xh100-lmcache": {
        "engine_version": "0.9.2", "settings": {"gpu_memory_utilization": 0.9},
        "why": "notes: \"Default gpu_memory_utilization (0.9) and default max_model_len\"; the source issue "
               "(#21348) was filed 2025-07-22, when v0.9.2 was the current release (v0.10.0 came 07-24), and "
               "the notes' reply blames PR #19312, which is in it",
    },
    "vllm/006-club3090-qwen36-35b-a3b-nvfp4-5090": {
        "settings": {"kv_cache_dtype": "fp8", "max_num_seqs": 1, "enable_prefix_caching": True},
        "why": "notes: \"fp8 KV cache, prefix caching, max_num_seqs 1\"",
    },
}

NOT_NVIDIA = re.compile(r"\b(MI\d{3}|AMD|ROCm|NPU|Ascend|MUSA|Moore|XPU|Arc|Tenstorrent|CPU)\b", re.I)
BLOCK_SIZE = 16


def _clean_model(text: Any) -> str | None:
    if not text or not isinstance(text, str):
        return None
    return text.split(" (")[0].strip() or None


def _clean_gpu(text: Any) -> str | None:
    """The GPU as the catalog knows it (its torch total and interconnect come with it), else its size.

    A stated nvidia-smi total wins over a catalog entry whose total differs from it.
    """
    if not text or not isinstance(text, str):
        return None
    name = re.split(r" \(|,", text)[0].strip() or None
    m = re.search(r"nvidia-smi total (\d+) MiB", text)
    for candidate in (text.strip(), name):  # "NVIDIA A100 (80GB)" needs its parenthesis to say which A100
        if not candidate:
            continue
        try:
            if m is None or resolve_gpu(candidate)[1] == int(m.group(1)):
                resolve_gpu(candidate)
                return candidate
        except InputError:
            pass
    return f"{m.group(1)}MiB" if m else name


def _tp(meta: dict[str, Any]) -> int | None:
    tp = meta.get("tp")
    if isinstance(tp, int):
        return tp
    if isinstance(tp, str) and tp.strip().split(" ")[0].isdigit():
        return int(tp.strip().split(" ")[0])
    if meta.get("num_gpus") == 1:
        return 1
    return None


def _truth(meta: dict[str, Any]) -> int | None:
    gt = meta.get("ground_truth") or {}
    for key in ("kv_tokens", "max_total_num_tokens"):
        if isinstance(gt.get(key), int):
            return gt[key]
    if isinstance(gt.get("num_gpu_blocks"), int):
        return gt["num_gpu_blocks"] * BLOCK_SIZE
    return None


def _flag_value(value: Any) -> Any:
    if isinstance(value, str):
        first = value.split(" (")[0].strip()
        try:
            return json.loads(first)
        except ValueError:
            return first
    return value


def _count(value: Any) -> int:
    """A TP/DP size as written ('8', 8, '8 (TP8)'); 1 when it is not a number."""
    m = re.match(r"\s*(\d+)", str(value))
    return int(m.group(1)) if m and int(m.group(1)) > 0 else 1


def _launch_settings(meta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """(engine settings, parallelism) from launch_flags_known, settings and a launch command."""
    settings: dict[str, Any] = {}
    par: dict[str, int] = {}
    for key, value in (meta.get("launch_flags_known") or {}).items():
        k = key.lstrip("-").replace("-", "_")
        if k in ("tp", "tp_size", "tensor_parallel_size"):
            par["tp"] = _count(value)
        elif k in ("dp", "dp_size"):
            par["dp"] = _count(value)
        elif k != "attention_backend":
            settings[k] = _flag_value(value)
    settings.update(meta.get("settings") or {})
    cmd = meta.get("launch_command") or ""
    for line in cmd.splitlines():
        line = line.strip().lstrip("$").strip().rstrip("\\")
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        for i, w in enumerate(words):
            if not w.startswith("--"):
                continue
            name = w[2:].replace("-", "_")
            nxt = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else None
            if name in ("tp", "tp_size", "tensor_parallel_size"):
                par["tp"] = _count(nxt)
            elif name in ("dp", "dp_size", "data_parallel_size"):
                par["dp"] = _count(nxt)
            elif name in ("model", "model_path", "kv_transfer_config"):
                continue
            else:
                settings[name] = True if nxt is None else _flag_value(nxt)
        for m in re.finditer(r"(\w+)=([\w.\"']+)", line):
            if m.group(1) in ("max_num_seqs", "max_model_len", "gpu_memory_utilization"):
                settings[m.group(1)] = _flag_value(m.group(2).strip("\"'"))
    return settings, par


# What vLLM's "non-default args: {…}" line (the engine's echo of the launch flags the user changed)
# may add to a case's launch facts. It is the launch command, not a number the engine computed; and
# a flag it lacks was left at the release default.
LOGGED_ARGS = ("max_model_len", "max_num_batched_tokens", "max_num_seqs", "kv_cache_dtype", "enable_prefix_caching",
               "gpu_memory_utilization", "block_size", "enforce_eager", "limit_mm_per_prompt", "cpu_offload_gb",
               "kv_cache_memory_bytes", "speculative_config")


# vLLM's memory-profiling lines echo the configured utilization ("gpu_memory_utilization=0.90",
# "x gpu_memory_utilization (0.90)"): the setting, not a number the engine computed.
UTIL_ECHO = re.compile(r"gpu_memory_utilization[=( ]+\(?([01]?\.\d+)")


def _logged_args(meta: dict[str, Any], log: Path) -> dict[str, Any] | None:
    """The launch flags a vLLM log echoes (its 'non-default args' line, the utilization its profiling
    lines repeat), or None without either."""
    if meta.get("engine") != "vllm" or not log.is_file():
        return None
    from kvscope.engines.vllm.args import parse_non_default_args

    text = log.read_text(errors="replace")
    out: dict[str, Any] | None = None
    for line in text.splitlines():
        if "non-default args:" in line:
            args = parse_non_default_args(line)
            out = {k: args[k] for k in LOGGED_ARGS if k in args}
            break
    util = UTIL_ECHO.search(text)
    if util and "gpu_memory_utilization" not in (out or {}):
        out = {**(out or {}), "gpu_memory_utilization": float(util.group(1))}
    return out


def _version(meta: dict[str, Any], log: Path) -> tuple[str | None, str]:
    text = meta.get("engine_version")
    if text:
        m = re.search(r"v?(\d+\.\d+\.\d+)", str(text))
        if m:
            return m.group(1), "meta.json engine_version"
    if meta.get("engine") == "sglang" and log.is_file():
        m = re.search(r"\[(20\d\d-\d\d-\d\d)", log.read_text(errors="replace"))
        if m:
            newest = None
            for date, version in sg_eras.BUILD_DATES:
                if date <= m.group(1):
                    newest = version
            if newest:
                return sg_eras.fmt(newest), f"newest release built before the log's date {m.group(1)}"
    return None, "unknown (plan's default: newest documented release)"


def _case(case_dir: Path) -> dict[str, Any]:
    meta = json.loads((case_dir / "meta.json").read_text())
    name = f"{case_dir.parent.name}/{case_dir.name}"
    engine = meta.get("engine")
    row: dict[str, Any] = {"case": name, "engine": engine}
    if engine not in ("sglang", "vllm"):
        return {**row, "skip": f"engine {engine} is not planned"}
    truth = _truth(meta)
    model, gpu, tp = _clean_model(meta.get("model")), _clean_gpu(meta.get("gpu")), _tp(meta)
    why = [w for w, bad in (("no logged KV token count", truth is None), ("model not named", model is None),
                            ("GPU not named", gpu is None)) if bad]
    if gpu and NOT_NVIDIA.search(str(meta.get("gpu"))):
        why.append("not an NVIDIA GPU")
    if "ktransformers" in json.dumps(meta).lower():
        why.append("ktransformers fork (experts on the CPU)")
    if why:
        return {**row, "skip": "; ".join(why)}
    if load_model_config(model) is None:
        return {**row, "skip": f"model {model!r} not in the catalog"}
    try:
        resolve_gpu(gpu)
    except InputError as e:
        return {**row, "skip": f"GPU {gpu!r}: {str(e).split(';')[0]}"}
    settings, par = _launch_settings(meta)
    logged = _logged_args(meta, case_dir / "log.txt")
    for key, value in (logged or {}).items():
        settings.setdefault(key, value)
    tp = par.get("tp") or tp
    if tp is None:
        return {**row, "skip": "tensor-parallel size unknown"}
    facts = CASE_FACTS.get(name, {})
    settings.update(facts.get("settings") or {})
    version, vhow = _version(meta, case_dir / "log.txt")
    if facts.get("engine_version"):
        version, vhow = facts["engine_version"], "CASE_FACTS (from meta notes)"
    dp = par.get("dp", 1)
    if settings.pop("enable_dp_attention", None):
        settings["enable_dp_attention"] = True
    req = PlanRequest(model=model, gpu=gpu, engine=engine, engine_version=version, tp=tp, dp=dp, settings=settings)
    try:
        pred = plan(req)
    except InputError as e:
        return {**row, "skip": f"plan refused the launch facts: {e}"}
    caveats = _caveats(meta, settings, vhow, pred, logged is not None)
    got = pred["capacity"]["kv_tokens"]
    err = (got - truth) / truth * 100
    low, high = pred["capacity"].get("kv_tokens_range") or (got, got)
    return {**row, "model": model, "gpu": pred["gpu"]["gpu"], "tp": tp, "dp": dp, "version": pred["engine_version"],
            "version_from": vhow, "settings": settings, "facts": facts.get("why"), "logged_args": logged, "logged": truth, "predicted": got,
            "range": [low, high], "in_range": low <= truth <= high, "error_pct": err, "weights_gib": pred["weights"]["gib_per_rank"], "warnings": pred["warnings"],
            "caveats": caveats}


def _caveats(meta: dict[str, Any], settings: dict[str, Any], version_from: str, pred: dict[str, Any],
             args_logged: bool = False) -> list[str]:
    """What the plan could not know for this case (launch facts missing, features not modelled)."""
    out = []
    if version_from.startswith("unknown"):
        out.append("release unknown")
    stated = {k: meta.get(k) for k in ("notes", "launch_command", "launch_flags_known", "settings", "title")}
    text = json.dumps(stated).lower()  # what the case states about its launch, never its ground truth
    # LMCache's vLLM connector holds one chunk on the GPU (2 × layers × 256 tokens × KV width: ~12 MiB
    # for Qwen3-235B at TP4) — negligible; its NIXL / disaggregated-prefill paths allocate GPU pools.
    if ("lmcache" in text or "kv_connector" in text) and any(w in text for w in ("nixl", "enable_pd", "kv_producer",
                                                                                 "kv_consumer", "disagg")):
        out.append("KV connector GPU pool (disaggregated prefill) not modelled")
    if any("hybrid linear-attention" in w for w in pred["warnings"]):
        out.append("hybrid linear-attention model not modelled for vLLM")
    if any("multimodal" in w and "unknown" in w for w in pred["warnings"]):
        out.append("vision tower / encoder budget unknown")
    named = str(meta.get("model") or "")
    if re.search(r" / | or |\?", named):
        out.append("model named two ways in the post")
    model = pred.get("model")
    asked, used = named.split(" (")[0].strip(), str((model.get("name") if isinstance(model, dict) else model) or "")
    if "/" in asked and "/" in used and asked.split("/")[0].lower() != used.split("/")[0].lower() \
            and not Path(asked).is_absolute():
        out.append(f"another publisher's checkpoint than the catalog's {used}")
    if pred["engine"] == "vllm" and "gpu_memory_utilization" not in settings and "util" not in text and not args_logged:
        out.append("gpu_memory_utilization not stated (release default assumed)")
    return out


def _safe_case(case_dir: Path) -> dict[str, Any]:
    """One case's row; a meta.json this harness cannot read is reported as skipped, never a crash."""
    try:
        return _case(case_dir)
    except (ValueError, TypeError, AttributeError, KeyError) as e:
        return {"case": f"{case_dir.parent.name}/{case_dir.name}", "engine": None,
                "skip": f"meta.json not understood ({type(e).__name__}: {e})"[:160]}


def run(cases: Path) -> dict[str, Any]:
    rows = [_safe_case(d) for d in sorted(p for p in cases.glob("*/*") if (p / "meta.json").is_file())]
    planned = [r for r in rows if "skip" not in r]
    mae = sum(abs(r["error_pct"]) for r in planned) / len(planned) if planned else None
    clean = [r for r in planned if not r["caveats"]]
    mae_clean = sum(abs(r["error_pct"]) for r in clean) / len(clean) if clean else None
    return {"mean_abs_error_pct": mae, "mean_abs_error_pct_fully_specified": mae_clean,
            "fully_specified_cases": len(clean), "in_range": sum(r["in_range"] for r in planned),
            "in_range_fully_specified": sum(r["in_range"] for r in clean), "planned": planned, "skipped": [r for r in rows if "skip" in r]}


TRUTH = ROOT / "tests" / "fixtures" / "gpu"  # our own startups on a real GPU, every setting known
TRUTH_SGLANG = ROOT / "tests" / "fixtures" / "gpu-sglang"  # the same for SGLang 0.5.17
# load_format stays: dummy weights make an EAGLE drafter share the target's lm_head (plan_spec)
_NOT_SETTINGS = {"model", "skip_tokenizer_init", "limit_mm_per_prompt"}


def _truth_case(case_dir: Path) -> dict[str, Any]:
    """One GPU truth run (benchmarks/gpu): plan from its config.json, the GPU and every setting it ran with.

    The runs are offline ``vllm.LLM`` engines (``offline=true``: the LLM class's batch defaults), dummy
    weights; a run another process shared the GPU with, or that failed, has no capacity to compare."""
    meta = json.loads((case_dir / "meta.json").read_text())
    if meta.get("engine") == "sglang":
        return _sglang_truth_case(case_dir, meta)
    row: dict[str, Any] = {"case": case_dir.name, "engine": meta.get("engine")}
    kv = (meta.get("observed") or {}).get("kv_tokens")
    kw = dict((meta.get("settings") or {}).get("llm_kwargs") or {})
    if not kv:
        return {**row, "skip": "a failed startup (no KV capacity)"}
    if (meta.get("settings") or {}).get("other_process_holding_gib"):
        return {**row, "skip": "another process held GPU memory"}
    settings: dict[str, Any] = {k: v for k, v in kw.items() if k not in _NOT_SETTINGS}
    settings["offline"] = True
    limits = kw.get("limit_mm_per_prompt")
    if isinstance(limits, dict):
        settings["limit_mm_per_prompt"] = limits
    spec = settings.pop("speculative_config", None)
    if isinstance(spec, dict):
        if (case_dir / "draft_config.json").is_file():
            settings["speculative_config"] = {**spec, "model": str(case_dir / "draft_config.json")}
        else:
            return {**row, "skip": "drafter config not kept"}
    return _plan_truth(row, case_dir, meta, "vllm", settings, kv)


def _plan_truth(row: dict[str, Any], case_dir: Path, meta: dict[str, Any], engine: str, settings: dict[str, Any],
                kv: int) -> dict[str, Any]:
    """Plan one truth run on the H200 from its config.json and settings; the row compares it with the logged kv."""
    req = PlanRequest(model=str(case_dir / "config.json"), gpu="H200", engine=engine,
                      engine_version=meta.get("engine_version"), tp=int(meta.get("num_gpus") or 1), settings=settings)
    try:
        pred = plan(req)
    except InputError as e:
        return {**row, "skip": f"plan refused: {e}"}
    got = pred["capacity"]["kv_tokens"]
    low, high = pred["capacity"].get("kv_tokens_range") or (got, got)
    # a run whose meta records a first start's extra profile memory (a warm twin measured it): no launch flag says it
    cold = [c.split(":")[0] for c in meta.get("caveats") or [] if str(c).startswith("compiled cold:")]
    return {**row, "model": meta.get("model"), "version": pred["engine_version"], "settings": settings, "logged": kv,
            "predicted": got, "range": [low, high], "in_range": low <= kv <= high,
            "error_pct": (got - kv) / kv * 100, "caveats": [f"{c} (a warm restart's twin logged more)" for c in cold]}


_SGLANG_NOT_SETTINGS = {"trust_remote_code"}  # flags that size nothing


def _sglang_flags(flags: list[str], case_dir: Path) -> dict[str, Any]:
    """The launch flags as plan settings: '--mem-fraction-static 0.7' → mem_fraction_static=0.7, a flag with no
    value → true; the drafter's folder is the draft_config.json kept beside the log."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(flags):
        key = flags[i].lstrip("-").replace("-", "_")
        value: Any = True
        if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            value = _flag_value(flags[i + 1])
            i += 1
        i += 1
        if key == "speculative_draft_model_path":
            value = str(case_dir / "draft_config.json")
        if key not in _SGLANG_NOT_SETTINGS:
            out[key] = value
    return out


def _sglang_truth_case(case_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """One SGLang truth run (benchmarks/gpu/sglang): plan from config.json, the GPU and the launch flags."""
    row: dict[str, Any] = {"case": case_dir.name, "engine": "sglang"}
    kv = (meta.get("observed") or {}).get("kv_tokens")
    settings_meta = meta.get("settings") or {}
    if not kv:  # a run that failed after sizing its pool (s16, s19: at graph capture) is planned like any other
        return {**row, "skip": "a failed startup (no KV capacity)"}
    if settings_meta.get("other_process_holding_gib"):
        return {**row, "skip": "another process held GPU memory"}
    settings = _sglang_flags(list(settings_meta.get("flags") or []), case_dir)
    return _plan_truth(row, case_dir, meta, "sglang", settings, kv)


def run_truth(cases: Path) -> dict[str, Any]:
    rows = []
    for d in sorted(p for p in cases.iterdir() if (p / "meta.json").is_file()):
        try:
            rows.append(_truth_case(d))
        except (ValueError, TypeError, KeyError) as e:
            rows.append({"case": d.name, "engine": None, "skip": f"meta.json not understood ({e})"[:160]})
    planned = [r for r in rows if "skip" not in r]
    mae = sum(abs(r["error_pct"]) for r in planned) / len(planned) if planned else None
    clean = [r for r in planned if not r["caveats"]]
    mae_clean = sum(abs(r["error_pct"]) for r in clean) / len(clean) if clean else None
    return {"mean_abs_error_pct": mae, "mean_abs_error_pct_fully_specified": mae_clean, "fully_specified_cases": len(clean),
            "in_range": sum(r["in_range"] for r in planned), "in_range_fully_specified": sum(r["in_range"] for r in clean),
            "planned": planned, "skipped": [r for r in rows if "skip" in r]}


SETS = {  # the shared real logs (the benchmark), and public logs harvested later as a held-out check
    "shared": ROOT / "tests" / "fixtures" / "logs",
    "held-out": ROOT / "tests" / "fixtures" / "harvested",
    "gpu-truth": TRUTH,  # reported on its own: the bar is ≤ 1 % mean absolute error, range ≥ 90 %
    "gpu-truth-sglang": TRUTH_SGLANG,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", action="append", help="a directory of <engine>/<case>/meta.json (repeatable); "
                    "default: the shared fixtures, then the held-out harvested logs, each reported on its own")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--skipped", action="store_true", help="also list the cases that could not be planned")
    args = ap.parse_args()
    sets = {c: Path(c) for c in args.cases} if args.cases else {k: v for k, v in SETS.items() if v.is_dir()}
    results = {name: (run_truth(path) if path.resolve() in (TRUTH.resolve(), TRUTH_SGLANG.resolve()) else run(path)) for name, path in sets.items()}
    if args.json:
        print(json.dumps(results if len(results) > 1 else next(iter(results.values())), indent=2, default=str))
        return
    for i, (name, result) in enumerate(results.items()):
        if len(results) > 1:
            print(("\n" if i else "") + f"== {name}: {sets[name]}")
        _print(result, args.skipped)


def _print(result: dict[str, Any], skipped: bool) -> None:
    print(f"{'case':58} {'version':>8} {'logged':>10} {'predicted':>10} {'error':>8} {'in range':>8}  "
          "what plan could not know")
    for r in sorted(result["planned"], key=lambda r: -abs(r["error_pct"])):
        print(f"{r['case'][:58]:58} {r['version']:>8} {r['logged']:>10,} {r['predicted']:>10,} "
              f"{r['error_pct']:>+7.1f}% {'yes' if r['in_range'] else 'no':>8}  {'; '.join(r['caveats']) or '—'}")
    n = len(result["planned"])
    mae = result["mean_abs_error_pct"]
    print(f"\n{n} cases planned; mean absolute error {mae:.1f}%" if n else "\nno case could be planned")
    if result["fully_specified_cases"]:
        print(f"{result['fully_specified_cases']} fully specified cases (nothing in the last column); "
              f"mean absolute error {result['mean_abs_error_pct_fully_specified']:.1f}%")
    if n:
        print(f"logged value inside the plan's stated range: {result['in_range']} of {n} "
              f"({result['in_range_fully_specified']} of {result['fully_specified_cases']} fully specified)")
    if skipped:
        print("\nnot planned:")
        for r in result["skipped"]:
            print(f"  {r['case'][:58]:58} {r['skip']}")


if __name__ == "__main__":
    main()
