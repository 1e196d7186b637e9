# ruff: noqa: SIM115  (device-side harness: log files stay open across the engine subprocess; best-effort cleanup)
"""Turn what the device calls brought back into tests/fixtures/gpu/<NNN>-<slug>/.

Run here: python3 benchmarks/gpu/make_fixtures.py RUNS_DIR_OR_TARBALL... [--out tests/fixtures/gpu]

Each argument is a runs-*.tar.xz from drive.py (or a folder where they were unpacked). For every
run this writes log.txt (the engine's log, byte for byte), config.json (the exact file the model
folder held) and meta.json, whose "observed" values are read from the log (num_gpu_blocks, which
vLLM 0.26.0 does not print at INFO, comes from the engine's own cache_config after start, read by
engine_once.py). Then README.md lists the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

CAVEATS_ALL = [
    "VLLM_USE_FLASHINFER_SAMPLER=0: a stock install samples with flashinfer; flashinfer was not installed, "
    "so FLASHINFER is missing from the attention backends' candidate lists (on Hopper vLLM picks FLASH_ATTN "
    "first either way)",
    "dummy weights (load_format='dummy'): weight memory is the real bf16 size, values are random; "
    "skip_tokenizer_init=True, the model folder holds only config.json",
    "offline vllm.LLM, not `vllm serve`: its defaults differ (this engine resolved max_num_seqs=1024, "
    "max_num_batched_tokens=16384, disable_log_stats=True)",
    "vLLM 0.26.0 wheel minus FA2, vllm-rs, fmha_sm100 and deep_gemm builds for other Pythons, installed with "
    "pip --target /tmp/kvs/site on the GPU machine's own torch 2.11.0+cu130 (Python 3.12.3); "
    "nvidia-cutlass-dsl not installed (the log says cuteDSL ll_bf16_gemm disabled)",
    "HF_HUB_OFFLINE=1, TRANSFORMERS_OFFLINE=1, VLLM_NO_USAGE_STATS=1 (the machine has no network)",
    "free_memory_before_gib/total_memory_gib are NVML's (no CUDA context open); the engine's own view "
    "(torch, after its CUDA context) is in observed.engine_free_gib/engine_total_gib",
]

CAVEATS_FAIL = ("the log ends with the engine core's traceback, then the Python traceback of the LLM(...) "
                "call as printed by the harness (traceback.print_exc), as an uncaught exception would print it")

PAT = {
    "available_kv_gib": (r"Available KV cache memory: (-?[\d.]+) GiB", float),
    "kv_tokens": (r"GPU KV cache size: ([\d,]+) tokens", lambda s: int(s.replace(",", ""))),
    "max_concurrency": (r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x", float),
    "concurrency_for_tokens": (r"Maximum concurrency for ([\d,]+) tokens per request", lambda s: int(s.replace(",", ""))),
    "max_model_len": (r"Using max model len (\d+)", int),
    "weights_gib": (r"Model loading took ([\d.]+) GiB", float),
    "attention_backend": (r"Using (\S+) attention backend", str),
    "moe_backend": (r"Using (\S+) Unquantized MoE backend", str),
    "cuda_graph_gib": (r"Graph capturing finished in \d+ secs, took ([\d.]+) GiB", float),
    "peak_activation_gib": (r"([\d.]+) GiB for peak activation", float),
    "non_torch_gib": (r"([\d.]+) GiB for non-torch mem", float),
    "engine_free_gib": (r"Free memory on device (?:cuda:\d+ )?\(([\d.]+)/[\d.]+ GiB\)", float),
    "engine_total_gib": (r"Free memory on device (?:cuda:\d+ )?\([\d.]+/([\d.]+) GiB\)", float),
    "cuda_graph_pool_actual_gib": (r"CUDA graph pool memory: ([\d.]+) GiB \(actual\)", float),
    "cuda_graph_pool_estimated_gib": (r"CUDA graph pool memory: [\d.]+ GiB \(actual\), ([\d.]+) GiB \(estimated\)", float),
}


def read_patterns(log: str, patterns: dict) -> dict:
    """{key: conv(first group)} for each (regex, conv) in patterns that the log matches: read independently of
    kvscope, so a fixture's "observed" values are no echo of the code under test."""
    out = {}
    for key, (rx, conv) in patterns.items():
        m = re.search(rx, log)
        if m:
            out[key] = conv(m.group(1))
    return out


def observe(log: str) -> dict:
    out = read_patterns(log, PAT)
    if "Using V2 Model Runner" in log:
        out["model_runner"] = "V2 Model Runner"
    elif "gpu_model_runner.py" in log:
        out["model_runner"] = "V1 GPUModelRunner"
    return out


def failure_line(log: str) -> str | None:
    for line in log.splitlines():
        m = re.search(r"\] (ValueError: .*)$", line)
        if m:
            return m.group(1)
    for line in log.splitlines():  # the engine core's root cause of another type (torch.OutOfMemoryError, ...)
        m = re.search(r"\[core\.py:\d+\] ((?:\w+\.)*\w+(?:Error|Exception): .*)$", line)
        if m:
            return m.group(1)
    for line in reversed(log.splitlines()):
        if re.match(r"^(\w+Error|RuntimeError): ", line):
            return line
    return None


def changed(kwargs: dict) -> str:
    ks = {k: v for k, v in kwargs.items() if k not in ("model", "load_format", "skip_tokenizer_init")}
    return ", ".join(f"{k}={v}" for k, v in ks.items()) or "(none: every vLLM default)"


def collect(paths: list[str], tmp: str) -> list[str]:
    dirs = []
    for p in paths:
        if p.endswith(".tar.xz"):
            with tarfile.open(p) as tf:
                tf.extractall(tmp, filter="data")
            base = tmp
        else:
            base = p
        for name in sorted(os.listdir(base)):
            d = os.path.join(base, name)
            if os.path.isfile(os.path.join(d, "run.json")) and d not in dirs:
                dirs.append(d)
    return sorted(set(dirs), key=os.path.basename)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "gpu"))
    ap.add_argument("--machine-of", default="", help="name=label,... which lent machine ran each run")
    args = ap.parse_args()
    machine = dict(kv.split("=", 1) for kv in args.machine_of.split(",") if kv)
    tmp = tempfile.mkdtemp()
    rows = []
    for d in collect(args.inputs, tmp):
        run = json.load(open(os.path.join(d, "run.json")))
        name = run["name"]
        res = run.get("result", {})
        log_bytes = open(os.path.join(d, "log.txt"), "rb").read()
        log = log_bytes.decode("utf-8", errors="replace")
        case = os.path.join(args.out, name)
        os.makedirs(case, exist_ok=True)
        with open(os.path.join(case, "log.txt"), "wb") as f:
            f.write(log_bytes)
        shutil.copy(os.path.join(d, "config.json"), os.path.join(case, "config.json"))
        if os.path.isfile(os.path.join(d, "draft_config.json")):  # speculative drafter's config.json
            shutil.copy(os.path.join(d, "draft_config.json"), os.path.join(case, "draft_config.json"))
        obs = observe(log)
        resolved = res.get("resolved") or {}
        obs["num_gpu_blocks"] = resolved.get("num_gpu_blocks")
        obs["num_gpu_blocks_source"] = ("engine's vllm_config.cache_config.num_gpu_blocks read after start "
                                        "(vLLM 0.26.0 prints no block count at INFO)") if resolved else None
        if resolved:
            obs["engine_resolved"] = resolved
        failed = not (res.get("success") and run.get("exit_code") == 0)
        nv = run.get("nvml_before", {})
        source = open(os.path.join(HERE, "models", run["model_dir"], "SOURCE.txt")).read().split("\n")[1]
        caveats = list(CAVEATS_ALL)
        caveats.append(f"config.json: {source}")
        if run.get("draft_model_dir"):
            dsrc = open(os.path.join(HERE, "models", run["draft_model_dir"], "SOURCE.txt")).read().split("\n")[1]
            caveats.append(f"draft_config.json (the speculative drafter's folder held only it; dummy weights): {dsrc}")
        if run.get("hold_gib"):
            caveats.append(f"on purpose, another process held {run['hold_gib']} GiB of GPU memory during the run "
                           "(a torch.empty on the same GPU), so free memory was short")
        if failed:
            caveats.append(CAVEATS_FAIL)
        m = machine.get(name)
        if m:
            caveats.append(f"ran on lent machine {m} (vLLM's torch.compile cache under ~/.cache/vllm starts empty on "
                           "each machine: the first run of a model there compiles cold; mostly timings only, but Nemotron-H's "
                           "profile peak was 1.74 GiB higher cold: 042 against 049)")
        meta = {
            "engine": "vllm", "engine_version": res.get("vllm_version", "0.26.0"),
            "gpu": nv.get("name", "NVIDIA H200"), "num_gpus": 1, "driver": nv.get("driver"),
            "model": run["model"], "config_json": "config.json",
            "settings": {"llm_kwargs": run["llm_kwargs"], "env": run["env"],
                         "other_process_holding_gib": run.get("hold_gib")},
            "settings_changed_from_default": changed(run["llm_kwargs"]),
            "free_memory_before_gib": round(nv["free_bytes"] / 2**30, 3) if "free_bytes" in nv else None,
            "total_memory_gib": round(nv["total_bytes"] / 2**30, 3) if "total_bytes" in nv else None,
            "nvidia_smi_before": run.get("nvidia_smi_before"),
            "run_at": run["run_at"],
            "wall_s": run.get("wall_s"), "exit_code": run.get("exit_code"),
            "how": "kvscope benchmarks/gpu harness, dummy weights, offline vllm.LLM",
            "caveats": caveats, "observed": obs, "failed": failed,
        }
        if failed:
            meta["failure"] = failure_line(log) or res.get("exception")
            meta["python_exception"] = res.get("exception")
        with open(os.path.join(case, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
        rows.append((name, run["model"], changed(run["llm_kwargs"]) + (
            f"; {run['hold_gib']} GiB held by another process" if run.get("hold_gib") else ""),
            obs, failed, meta.get("failure"), run["run_at"][:10]))
    write_readme(args.out, all_rows(args.out, rows))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


def all_rows(out: str, rows: list) -> list:
    """The README lists every case folder under OUT (earlier sessions' too), not only this call's."""
    made = {r[0] for r in rows}
    for name in sorted(os.listdir(out)):
        mp = os.path.join(out, name, "meta.json")
        if name in made or not os.path.isfile(mp):
            continue
        m = json.load(open(mp))
        held = (m.get("settings") or {}).get("other_process_holding_gib")
        rows.append((name, m["model"], m["settings_changed_from_default"] + (
            f"; {held} GiB held by another process" if held else ""),
            m.get("observed", {}), m.get("failed"), m.get("failure"), m["run_at"][:10]))
    return sorted(rows, key=lambda r: r[0])


def write_readme(out: str, rows: list) -> None:
    lines = [
        "# Real vLLM 0.26.0 startup logs on one NVIDIA H200, every setting known (truth corpus)",
        "",
        "Each folder: `log.txt` (the engine's stdout+stderr, verbatim), `config.json` (the only file in the",
        "model folder; dummy weights), `meta.json` (every `vllm.LLM(...)` argument and environment variable,",
        "NVML free/total memory before the start, what the log printed, caveats). Made by",
        "`benchmarks/gpu` (see its README.md). Every run sampled without flashinfer",
        "(`VLLM_USE_FLASHINFER_SAMPLER=0`); a stock install samples with flashinfer.",
        "",
        "| dir | model | settings changed from the default | KV tokens (log) | GPU blocks | available KV GiB | failed | source, date |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, model, ch, obs, failed, failure, date in rows:
        tok = f"{obs['kv_tokens']:,}" if "kv_tokens" in obs else "—"
        blocks = f"{obs['num_gpu_blocks']:,}" if obs.get("num_gpu_blocks") else "—"
        avail = obs.get("available_kv_gib", "—")
        f = "no" if not failed else "yes: " + (failure or "")[:110].replace("|", "/")
        lines.append(f"| {name} | {model} | {ch} | {tok} | {blocks} | {avail} | {f} | benchmarks/gpu harness, {date} |")
    lines.append("")
    with open(os.path.join(out, "README.md"), "w") as fh:
        fh.write("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
