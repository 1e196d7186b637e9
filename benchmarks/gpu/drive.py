# ruff: noqa: SIM105,SIM115  (device-side harness: log files stay open across the engine subprocess; best-effort cleanup)
"""Device side: run the configurations of configs.json in order, one fresh process each.

Usage (on the GPU machine, from the repository root, PYTHONPATH holding vLLM):

    python3 benchmarks/gpu/drive.py --deadline-s 540 --out "$OUT"

The queue is configs.json in file order. A run finished in an earlier call on the same machine
(state under /tmp/kvs/state) is skipped, so consecutive calls continue the queue. Before each run,
when the configuration asks for it, a separate process holds `hold_gib` GiB of GPU memory (to make
free memory short on purpose); then free/total memory is read through NVML and nvidia-smi (the
driver itself never creates a CUDA context), engine_once.py is started in a new session with the
run's environment, its stdout+stderr go verbatim to log.txt, and its whole process group is ended
when it returns. A run is started only if its est_s fits in what is left of the deadline.

This call's runs are packed into OUT/runs-<stamp>.tar.xz (one file back per call) and a digest of
the capacity lines is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STATE = "/tmp/kvs/state"
WORK = "/tmp/kvs/runs"

# Environment of every engine process (also written to each meta.json).
BASE_ENV = {
    "VLLM_USE_FLASHINFER_SAMPLER": "0",  # flashinfer is not in the bundle
    "PYTHONUNBUFFERED": "1",
    "HF_HUB_OFFLINE": "1",  # the machine has no network: never wait on the Hub
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
}

DIGEST = re.compile(
    r"(Available KV cache memory|GPU KV cache size|Maximum concurrency|Model loading took|"
    r"CUDA graph pool|Graph capturing finished|Using .*backend|Error|ERROR|"
    r"Free memory on device|larger than the available KV|init engine)"
)


def nvml() -> dict:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        m = pynvml.nvmlDeviceGetMemoryInfo(h)
        name = pynvml.nvmlDeviceGetName(h)
        drv = pynvml.nvmlSystemGetDriverVersion()
        pynvml.nvmlShutdown()
        return {"total_bytes": int(m.total), "free_bytes": int(m.free), "used_bytes": int(m.used),
                "name": name.decode() if isinstance(name, bytes) else name,
                "driver": drv.decode() if isinstance(drv, bytes) else drv}
    except Exception as e:  # noqa: BLE001
        return {"error": repr(e)}


def smi() -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,memory.used,memory.free,driver_version",
             "--format=csv"], capture_output=True, text=True, timeout=20).stdout
    except Exception as e:  # noqa: BLE001
        return f"error: {e!r}"


def wait_idle(limit_s: float = 40.0, used_below: float = 2.0 * 2**30) -> dict:
    t0 = time.time()
    m = nvml()
    while time.time() - t0 < limit_s and m.get("used_bytes", 0) > used_below:
        time.sleep(1.0)
        m = nvml()
    return m


def start_hold(gib: float) -> subprocess.Popen:
    code = ("import sys,time,torch\n"
            f"x=torch.empty(int({gib}*2**30),dtype=torch.uint8,device='cuda')\n"
            "torch.cuda.synchronize();print('held',flush=True)\n"
            "time.sleep(3600)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    line = p.stdout.readline()
    if "held" not in line:
        raise RuntimeError(f"memory holder did not start: {line!r}")
    return p


def end_group(p: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)
    try:
        p.wait(timeout=10)
    except Exception:  # noqa: BLE001
        pass


def queue(configs: str, only: str) -> list[dict]:
    """The runs of configs.json in file order: those --only names, else every one not marked "done" (fixtures
    made in an earlier session run again only through --only)."""
    runs = json.load(open(configs))["runs"]
    if only:
        keep = set(only.split(","))
        return [r for r in runs if r["name"] in keep]
    return [r for r in runs if not r.get("done")]


def finish(out: str, prefix: str, work: str, state: str, runs: list[dict], done_now: list[str], digest: list[str],
           t_begin: float) -> int:
    """Pack this call's runs into OUT/<prefix>-<time>.tar.xz (one file back per call) and print the digest."""
    if done_now:
        tar_path = os.path.join(out, f"{prefix}-{time.strftime('%H%M%S')}.tar.xz")
        with tarfile.open(tar_path, "w:xz") as tf:
            for name in done_now:
                tf.add(os.path.join(work, name), arcname=name)
    left = [r["name"] for r in runs if not os.path.exists(os.path.join(state, r["name"]))]
    print("\n".join(digest))
    print(f"DRIVER done_now={done_now} left={left} total={time.time() - t_begin:.0f}s")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default=os.path.join(HERE, "configs.json"))
    ap.add_argument("--deadline-s", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated run names (default: the queue)")
    args = ap.parse_args()
    t_begin = time.time()
    os.makedirs(STATE, exist_ok=True)
    os.makedirs(WORK, exist_ok=True)
    runs = queue(args.configs, args.only)
    done_now, digest = [], []
    for r in runs:
        name = r["name"]
        if os.path.exists(os.path.join(STATE, name)):
            continue
        left = args.deadline_s - (time.time() - t_begin)
        if left < r.get("est_s", 120):
            digest.append(f"## {name}: not started ({left:.0f}s left, est {r.get('est_s')}s)")
            continue  # a shorter run further down may still fit
        rdir = os.path.join(WORK, name)
        shutil.rmtree(rdir, ignore_errors=True)
        os.makedirs(rdir)
        model_dir = os.path.join(HERE, "models", r["model_dir"])
        shutil.copy(os.path.join(model_dir, "config.json"), os.path.join(rdir, "config.json"))
        llm_kwargs = json.loads(json.dumps(r["llm_kwargs"]))
        if r.get("draft_model_dir"):  # a speculative drafter folder (config.json only, dummy weights too)
            draft_dir = os.path.join(HERE, "models", r["draft_model_dir"])
            shutil.copy(os.path.join(draft_dir, "config.json"), os.path.join(rdir, "draft_config.json"))
            llm_kwargs.setdefault("speculative_config", {})["model"] = draft_dir
        env = dict(os.environ)
        run_env = {**BASE_ENV, **r.get("env", {})}
        env.update(run_env)
        idle = wait_idle()
        holder = None
        if r.get("hold_gib"):
            holder = start_hold(r["hold_gib"])
            time.sleep(1.0)
        before = nvml()
        before_smi = smi()
        spec = {"model_dir": model_dir, "llm_kwargs": llm_kwargs}
        spec_path = os.path.join(rdir, "spec.json")
        json.dump(spec, open(spec_path, "w"), indent=1)
        tmo = int(max(30, min(r.get("timeout_s", 360), left - 15)))
        run_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        t0 = time.time()
        with open(os.path.join(rdir, "log.txt"), "wb") as logf:
            p = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "engine_once.py"), spec_path,
                 os.path.join(rdir, "result.json")],
                stdout=logf, stderr=subprocess.STDOUT, env=env, cwd="/tmp", start_new_session=True)
            try:
                rc = p.wait(timeout=tmo)
                timed_out = False
            except subprocess.TimeoutExpired:
                rc, timed_out = None, True
            end_group(p)
        wall = time.time() - t0
        if holder is not None:
            end_group(holder)
        res = {}
        try:
            res = json.load(open(os.path.join(rdir, "result.json")))
        except Exception:  # noqa: BLE001
            pass
        info = {
            "name": name, "model": r["model"], "model_dir": r["model_dir"],
            "draft_model_dir": r.get("draft_model_dir"),
            "llm_kwargs": {"model": model_dir, "load_format": "dummy", "skip_tokenizer_init": True,
                           **llm_kwargs},
            "env": run_env, "hold_gib": r.get("hold_gib"), "run_at": run_at,
            "nvml_idle_wait": idle, "nvml_before": before, "nvidia_smi_before": before_smi,
            "exit_code": rc, "timed_out": timed_out, "timeout_s": tmo, "wall_s": round(wall, 2),
            "result": res, "nvml_after": nvml(),
        }
        json.dump(info, open(os.path.join(rdir, "run.json"), "w"), indent=1)
        open(os.path.join(STATE, name), "w").write(str(rc))
        done_now.append(name)
        lines = open(os.path.join(rdir, "log.txt"), errors="replace").read().splitlines()
        digest.append(f"## {name}: rc={rc} timeout={timed_out} wall={wall:.0f}s ok={res.get('success')} "
                      f"free_before={before.get('free_bytes', 0) / 2**30:.2f}GiB lines={len(lines)} "
                      f"blocks={res.get('resolved', {}).get('num_gpu_blocks')}")
        digest.extend("   " + ln[:260] for ln in lines if DIGEST.search(ln))
        if res.get("exception"):
            digest.append("   EXC " + res["exception"][:400])
    return finish(args.out, "runs", WORK, STATE, runs, done_now, digest, t_begin)


if __name__ == "__main__":
    sys.exit(main())
