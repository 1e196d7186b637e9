"""Turn what the SGLang device calls brought back into tests/fixtures/gpu-sglang/<name>/.

Run here: python3 benchmarks/gpu/sglang/make_fixtures.py RUNS_DIR_OR_TARBALL... [--out tests/fixtures/gpu-sglang]

Each argument is a sglang-*.tar.xz from drive.py (or a folder where one was unpacked). For every run this
writes log.txt (the server's log, byte for byte), config.json (the exact file the model folder held; the
drafter's as draft_config.json) and meta.json: every flag and environment variable, NVML free/total memory
before the start, what the log printed (read with the regular expressions below, independent of kvscope),
caveats. Then README.md lists every case folder there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
GPU = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(GPU))
sys.path.insert(0, GPU)
from make_fixtures import collect, read_patterns  # noqa: E402  (benchmarks/gpu/make_fixtures.py)

CAVEATS_ALL = [
    "--attention-backend triton: the bundle leaves out FA3 (sgl_kernel/flash_ops, 1.1 GB), which SGLang picks "
    "on Hopper by default; --sampling-backend pytorch: flashinfer's JIT cache did not travel",
    "--load-format dummy: weight memory is the real size, values are random; --skip-tokenizer-init, the model "
    "folder holds only config.json",
    "SGLang 0.5.17 site folder (wheels unzipped, FA3, sm100 and tests left out) on the GPU machine's own torch "
    "2.11.0+cu130 (Python 3.12.3), PYTHONPATH=/tmp/kvsg/site; HF_HUB_OFFLINE=1, TRANSFORMERS_OFFLINE=1",
    "the server was stopped (SIGTERM to its process group) two seconds after 'The server is fired up and ready "
    "to roll!'",
    "free_memory_before_gib/total_memory_gib are NVML's (the driver opened no CUDA context)",
]

PAT = {
    "mem_fraction_static": (r"mem_fraction_static=([\d.]+)", float),
    "load_begin_avail_gib": (r"Load weight begin\. avail mem=([\d.]+) GB", float),
    "weights_gib": (r"Load weight end\..*?mem usage=([\d.]+) GB", float),
    "after_weights_avail_gib": (r"Load weight end\..*?avail mem=([\d.]+) GB", float),
    "kv_tokens": (r"KV Cache is allocated\..*?#tokens: (\d+)", int),
    "after_pool_avail_gib": (r"Memory pool end\. avail mem=([\d.]+) GB", float),
    "max_total_num_tokens": (r"max_total_num_tokens=(\d+)", int),
    "max_running_requests": (r"max_total_num_tokens=\d+, .*?max_running_requests=(\d+)", int),
    "context_len": (r"max_total_num_tokens=\d+, .*?context_len=(\d+)", int),
    "chunked_prefill_size": (r"max_total_num_tokens=\d+, chunked_prefill_size=(-?\d+)", int),
    "available_gpu_mem_gib": (r"max_total_num_tokens=\d+, .*?available_gpu_mem=([\d.]+) GB", float),
}


def observe(log: str) -> dict:
    out = read_patterns(log, PAT)
    graphs = re.findall(r"Capture (\w+ \w+) CUDA graph end\..*?mem usage=([\d.]+) GB", log)
    if graphs:
        out["cuda_graphs_gib"] = {k: float(v) for k, v in graphs}
    return out


def failure_line(log: str) -> str | None:
    for line in reversed(log.splitlines()):
        m = re.match(r"^((?:\w+\.)*\w+(?:Error|Exception): .*)$", line.strip())
        if m:
            return m.group(1)
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "gpu-sglang"))
    ap.add_argument("--machine-of", default="", help="name=label,... which lent machine ran each run")
    args = ap.parse_args()
    machine = dict(kv.split("=", 1) for kv in args.machine_of.split(",") if kv)
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp()
    for d in collect(args.inputs, tmp):
        run = json.loads(Path(d, "run.json").read_text())
        name = run["name"]
        log_bytes = Path(d, "log.txt").read_bytes()
        log = log_bytes.decode("utf-8", errors="replace")
        case = os.path.join(args.out, name)
        os.makedirs(case, exist_ok=True)
        with open(os.path.join(case, "log.txt"), "wb") as f:
            f.write(log_bytes)
        shutil.copy(os.path.join(d, "config.json"), os.path.join(case, "config.json"))
        if os.path.isfile(os.path.join(d, "draft_config.json")):
            shutil.copy(os.path.join(d, "draft_config.json"), os.path.join(case, "draft_config.json"))
        failed = run.get("status") != "ready"
        nv = run.get("nvml_before", {})
        caveats = list(CAVEATS_ALL)
        caveats.append("config.json: " + Path(GPU, "models", run["model_dir"], "SOURCE.txt").read_text().split("\n")[1])
        if run.get("draft_model_dir"):
            src = Path(GPU, "models", run["draft_model_dir"], "SOURCE.txt").read_text().split("\n")[1]
            caveats.append(f"draft_config.json (the drafter folder held only it; dummy weights): {src}")
        if run.get("hold_gib"):
            caveats.append(f"on purpose, another process held {run['hold_gib']} GiB of GPU memory during the run")
        if machine.get(name):
            caveats.append(f"ran on lent machine {machine[name]}")
        meta = {
            "engine": "sglang", "engine_version": "0.5.17",
            "gpu": nv.get("name", "NVIDIA H200"), "num_gpus": 1, "driver": nv.get("driver"),
            "model": run["model"], "config_json": "config.json",
            "settings": {"command": run["command"], "flags": run["flags"], "env": run["env"],
                         "other_process_holding_gib": run.get("hold_gib")},
            "settings_changed_from_default": " ".join(run["flags"]) or "(none: every SGLang default)",
            "free_memory_before_gib": round(nv["free_bytes"] / 2**30, 3) if "free_bytes" in nv else None,
            "total_memory_gib": round(nv["total_bytes"] / 2**30, 3) if "total_bytes" in nv else None,
            "nvidia_smi_before": run.get("nvidia_smi_before"), "run_at": run["run_at"],
            "wall_s": run.get("wall_s"), "status": run.get("status"), "ready_after_s": run.get("ready_after_s"),
            "how": "kvscope benchmarks/gpu/sglang harness: python3 -m sglang.launch_server, dummy weights",
            "caveats": caveats, "observed": observe(log), "failed": failed,
        }
        if failed:
            meta["failure"] = failure_line(log)
        with open(os.path.join(case, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
    write_readme(args.out)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


def write_readme(out: str) -> None:
    lines = [
        "# Real SGLang 0.5.17 startup logs on one NVIDIA H200, every setting known (truth corpus)",
        "",
        "Each folder: `log.txt` (the server's stdout+stderr, verbatim), `config.json` (the only file in the model",
        "folder; dummy weights), `meta.json` (the command, environment, NVML memory before the start, what the log",
        "printed, caveats). Made by `benchmarks/gpu/sglang` (see benchmarks/gpu/README.md). Every run used",
        "`--attention-backend triton --sampling-backend pytorch` (FA3 did not travel).",
        "",
        "| dir | model | flags | mem_fraction_static | KV tokens (log) | failed | date |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in sorted(os.listdir(out)):
        mp = os.path.join(out, name, "meta.json")
        if not os.path.isfile(mp):
            continue
        m = json.loads(Path(mp).read_text())
        o = m["observed"]
        tok = f"{o['kv_tokens']:,}" if "kv_tokens" in o else "—"
        held = m["settings"].get("other_process_holding_gib")
        flags = m["settings_changed_from_default"] + (f"; {held} GiB held by another process" if held else "")
        f = "no" if not m["failed"] else "yes: " + (m.get("failure") or "")[:110].replace("|", "/")
        lines.append(f"| {name} | {m['model']} | {flags} | {o.get('mem_fraction_static', '—')} | {tok} | {f} | "
                     f"{m['run_at'][:10]} |")
    lines.append("")
    with open(os.path.join(out, "README.md"), "w") as fh:
        fh.write("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
