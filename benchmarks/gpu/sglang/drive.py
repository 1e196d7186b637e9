# ruff: noqa: SIM115  (device-side harness: log files stay open across the server subprocess)
"""Device side: start SGLang once per configuration of configs.json, each a fresh process tree.

Usage (on the GPU machine, from the repository root, PYTHONPATH holding the unpacked bundle):

    python3 benchmarks/gpu/sglang/drive.py --deadline-s 540 --out "$OUT" [--only NAME,...]

Each run is ``python3 -m sglang.launch_server --model-path DIR --load-format dummy
--skip-tokenizer-init --attention-backend triton --sampling-backend pytorch ...`` where DIR holds
only a config.json. The server is stopped (its whole process group) once it logs "The server is
fired up and ready to roll!", or when it exits (a failure provoked on purpose), or at its timeout.
stdout+stderr go verbatim to log.txt; run.json holds the command, the environment, NVML free and
total memory read just before the start (the driver never opens a CUDA context) and the exit.

Why triton and pytorch: the bundle leaves out FA3 (1.1 GB) and flashinfer's JIT cache, so the
Hopper default backends (fa3, flashinfer sampling) cannot run; every run names the two it uses, and
make_fixtures.py writes that caveat into each meta.json.

State under /tmp/kvsg/state makes consecutive calls continue the queue; this call's runs come back
as OUT/sglang-<time>.tar.xz, with a digest of the memory lines printed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GPU = os.path.dirname(HERE)
sys.path.insert(0, GPU)
from drive import end_group, finish, nvml, queue, smi, start_hold, wait_idle  # noqa: E402  (benchmarks/gpu/drive.py)

STATE = "/tmp/kvsg/state"
WORK = "/tmp/kvsg/runs"
READY = "The server is fired up and ready to roll!"
BASE_FLAGS = ["--load-format", "dummy", "--skip-tokenizer-init", "--attention-backend", "triton",
              "--sampling-backend", "pytorch", "--host", "127.0.0.1"]
BASE_ENV = {"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
DIGEST = re.compile(r"(Load weight end|KV Cache is allocated|Memory pool end|CUDA graph end|"
                    r"max_total_num_tokens|mem_fraction_static=|Not enough memory|Loaded weights leave|"
                    r"Error|ERROR|ready to roll)")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default=os.path.join(HERE, "configs.json"))
    ap.add_argument("--deadline-s", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    t_begin = time.time()
    os.makedirs(STATE, exist_ok=True)
    os.makedirs(WORK, exist_ok=True)
    runs = queue(args.configs, args.only)
    done_now, digest = [], []
    for i, r in enumerate(runs):
        name = r["name"]
        if os.path.exists(os.path.join(STATE, name)):
            continue
        left = args.deadline_s - (time.time() - t_begin)
        if left < r.get("est_s", 120):
            digest.append(f"## {name}: not started ({left:.0f}s left, est {r.get('est_s')}s)")
            continue
        rdir = os.path.join(WORK, name)
        shutil.rmtree(rdir, ignore_errors=True)
        os.makedirs(rdir)
        model_dir = os.path.join(GPU, "models", r["model_dir"])
        shutil.copy(os.path.join(model_dir, "config.json"), os.path.join(rdir, "config.json"))
        flags = list(r.get("flags", []))
        if r.get("draft_model_dir"):
            draft_dir = os.path.join(GPU, "models", r["draft_model_dir"])
            shutil.copy(os.path.join(draft_dir, "config.json"), os.path.join(rdir, "draft_config.json"))
            flags += ["--speculative-draft-model-path", draft_dir]
        cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", model_dir, *BASE_FLAGS,
               "--port", str(30000 + i), *flags]
        run_env = {**BASE_ENV, **r.get("env", {})}
        env = {**os.environ, **run_env}
        idle = wait_idle()
        holder = start_hold(r["hold_gib"]) if r.get("hold_gib") else None
        if holder is not None:
            time.sleep(1.0)
        before, before_smi = nvml(), smi()
        tmo = max(30.0, min(r.get("timeout_s", 300), left - 15))
        run_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        t0 = time.time()
        status, ready_s = "timeout", None
        logp = os.path.join(rdir, "log.txt")
        with open(logp, "wb") as logf:
            p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, cwd="/tmp",
                                 start_new_session=True)
            while time.time() - t0 < tmo:
                time.sleep(1.0)
                if READY in open(logp, errors="replace").read():
                    status, ready_s = "ready", round(time.time() - t0, 1)
                    time.sleep(2.0)  # the lines after the ready line (first request) land
                    break
                if p.poll() is not None:
                    status = "exited"
                    break
            at_ready = nvml() if status == "ready" else None
            rc = p.poll()
            end_group(p)
        wall = time.time() - t0
        if holder is not None:
            end_group(holder)
        time.sleep(2.0)
        info = {"name": name, "model": r["model"], "model_dir": r["model_dir"],
                "draft_model_dir": r.get("draft_model_dir"), "command": cmd, "flags": flags,
                "env": run_env, "hold_gib": r.get("hold_gib"), "run_at": run_at,
                "nvml_idle_wait": idle, "nvml_before": before, "nvidia_smi_before": before_smi,
                "status": status, "exit_code_before_stop": rc, "ready_after_s": ready_s,
                "timeout_s": tmo, "wall_s": round(wall, 2), "nvml_at_ready": at_ready,
                "nvml_after": nvml()}
        json.dump(info, open(os.path.join(rdir, "run.json"), "w"), indent=1)
        open(os.path.join(STATE, name), "w").write(status)
        done_now.append(name)
        lines = open(logp, errors="replace").read().splitlines()
        digest.append(f"## {name}: {status} rc={rc} wall={wall:.0f}s ready={ready_s} "
                      f"free_before={before.get('free_bytes', 0) / 2**30:.2f}GiB lines={len(lines)}")
        digest.extend("   " + ln[:300] for ln in lines if DIGEST.search(ln))
        if status != "ready":
            digest.extend("   TAIL " + ln[:300] for ln in lines[-12:])
    return finish(args.out, "sglang", WORK, STATE, runs, done_now, digest, t_begin)


if __name__ == "__main__":
    sys.exit(main())
