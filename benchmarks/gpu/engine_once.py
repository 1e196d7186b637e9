# ruff: noqa: SIM105,SIM115  (device-side harness: log files stay open across the engine subprocess; best-effort cleanup)
"""One fresh process: start vLLM's offline engine once with dummy weights, then exit.

Usage (device side, started by drive.py): python3 engine_once.py SPEC.json RESULT.json

SPEC.json: {"model_dir": DIR, "llm_kwargs": {...}}. DIR holds only a config.json.
Nothing is printed by this file on success: stdout/stderr (this process and the engine-core
process it spawns) are the engine's own log, captured verbatim by the driver. What the harness
itself learns (timings, the engine's resolved cache settings, the exception on failure) goes to
RESULT.json, never into the log.
"""

import gc
import json
import sys
import time
import traceback


def _resolved(llm) -> dict:
    """The engine's own view of the cache settings after start (num_gpu_blocks included)."""
    out = {}
    try:
        cfg = llm.llm_engine.vllm_config
    except Exception as e:  # noqa: BLE001
        return {"error": repr(e)}
    cc, mc, sc = cfg.cache_config, cfg.model_config, cfg.scheduler_config
    for key, obj, attr in (
        ("num_gpu_blocks", cc, "num_gpu_blocks"), ("block_size", cc, "block_size"),
        ("cache_dtype", cc, "cache_dtype"), ("gpu_memory_utilization", cc, "gpu_memory_utilization"),
        ("max_model_len", mc, "max_model_len"), ("dtype", mc, "dtype"),
        ("max_num_seqs", sc, "max_num_seqs"), ("max_num_batched_tokens", sc, "max_num_batched_tokens"),
        ("enforce_eager", mc, "enforce_eager"),
    ):
        try:
            v = getattr(obj, attr)
            out[key] = v if isinstance(v, (int, float, str, bool, type(None))) else str(v)
        except Exception as e:  # noqa: BLE001
            out[key] = f"unavailable: {e!r}"
    return out


def main() -> int:
    spec = json.load(open(sys.argv[1]))
    res = {"t_start": time.time(), "success": False}
    rc = 0
    llm = None
    try:
        import vllm
        from vllm import LLM

        res["vllm_version"] = vllm.__version__
        res["t_imported"] = time.time()
        kwargs = {"load_format": "dummy", "skip_tokenizer_init": True, **spec["llm_kwargs"]}
        res["llm_kwargs"] = {"model": spec["model_dir"], **kwargs}
        llm = LLM(model=spec["model_dir"], **kwargs)
        res["t_ready"] = time.time()
        res["engine_start_s"] = round(res["t_ready"] - res["t_imported"], 2)
        res["resolved"] = _resolved(llm)
        res["success"] = True
    except BaseException as e:  # noqa: BLE001 - a failed startup is a result too
        res["exception"] = f"{type(e).__name__}: {e}"[:6000]
        res["traceback"] = traceback.format_exc()[-10000:]
        traceback.print_exc()  # what a user running this would see on the terminal
        rc = 1
    res["t_end"] = time.time()
    with open(sys.argv[2], "w") as f:
        json.dump(res, f, indent=1)
    sys.stdout.flush()
    sys.stderr.flush()
    if llm is not None:
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # noqa: BLE001
            pass
        del llm
        gc.collect()
    return rc


if __name__ == "__main__":
    sys.exit(main())
