"""Truth made on the project's H200 (tests/fixtures/gpu: vLLM 0.26.0, dummy weights, every setting known, one
fresh process per run; benchmarks/gpu is the harness): whatif calibrated on the default run predicts each
sibling run that changed one setting whatif models, and diff's terms sum to the difference."""

from __future__ import annotations

import json

import pytest

from kvscope.analysis.diff import diff
from kvscope.api import analyze
from tests.conftest import FIXTURES, plan_accuracy

GPU = FIXTURES / "gpu"
BASE = "001-"
# sibling → the most whatif may miss by: vLLM's profile peak moves by a few hundred tokens between runs (at util 0.3
# the pool is small, so the same few hundred tokens are 0.23 %); utilization 0.3–0.99, fp8 KV, max_model_len, default
SIBLINGS = {"002-": 0.002, "003-": 0.002, "004-": 0.002, "008-": 0.0, "014-": 0.001, "015-": 0.001, "016-": 0.001,
            "017-": 0.001, "018-": 0.0025, "019-": 0.001, "025-": 0.0}


def _run(prefix: str):
    found = sorted(GPU.glob(f"{prefix}*/log.txt"))
    if not found:
        pytest.skip(f"no truth run {prefix}* in tests/fixtures/gpu")
    return analyze([str(found[0])], model=str(found[0].parent / "config.json")).startups[-1]


@pytest.mark.parametrize("sibling", sorted(SIBLINGS))
def test_whatif_from_the_default_run_predicts_the_sibling(sibling):
    d = diff(_run(BASE), _run(sibling))
    assert d.explained_tokens == d.observed_tokens
    assert d.predicted is not None and abs(d.predicted.error) <= SIBLINGS[sibling], d.predicted


def test_every_truth_run_has_its_settings_and_source():
    metas = sorted(GPU.glob("*/meta.json"))
    if not metas:
        pytest.skip("no truth runs")
    for m in metas:
        meta = json.loads(m.read_text())
        assert meta.get("engine") == "vllm" and meta.get("engine_version") and "settings" in meta, m
        assert (m.parent / "log.txt").exists()


def test_plan_from_model_and_gpu_alone_meets_the_truth():
    """Issue 22's bar on every truth run that started: plan (no log, only config.json, the GPU and the settings)
    within 1 % on average and never more than 2.5 % off, its stated range holding ≥ 90 % of the runs. The rules
    that got it there (Model Runner V2's profile, tied embeddings by model type, shared experts) are each cited
    where they are written (engines/vllm/plan.py, model/weights.py)."""
    result = plan_accuracy().run_truth(GPU)
    planned = result["planned"]
    if len(planned) < 20:
        pytest.skip("fewer than 20 truth runs here")
    assert result["mean_abs_error_pct"] <= 1.0, result["mean_abs_error_pct"]
    # the worst bound holds where the launch says everything: not for 042, a first start whose cold torch.compile put
    # 1.74 GiB more in the profile than its warm twin 049 (its meta.json says so)
    worst = max((r for r in planned if not r["caveats"]), key=lambda r: abs(r["error_pct"]))
    assert abs(worst["error_pct"]) <= 2.5, worst
    assert result["in_range"] >= 0.9 * len(planned), [r["case"] for r in planned if not r["in_range"]]


def test_v2_model_runner_is_what_the_truth_logs_say():
    """The runner plan assumes for each truth run is the one its log names ("Using V2 Model Runner" or not)."""
    from kvscope.engines.vllm.plan import vllm_model_runner

    for d in sorted(p for p in GPU.iterdir() if (p / "config.json").is_file() and (p / "log.txt").is_file()):
        log = (d / "log.txt").read_text(errors="replace")
        if "Model loading took" not in log:
            continue
        cfg = json.loads((d / "config.json").read_text())
        runner, _ = vllm_model_runner((0, 26, 0), "V1", cfg, {})
        assert runner == ("V2" if "Using V2 Model Runner" in log else "V1"), d.name


@pytest.mark.parametrize("run", sorted(p.name for p in GPU.iterdir() if (p / "meta.json").is_file()) if GPU.is_dir()
                         else [])
def test_explain_reconciles_every_truth_run(run):
    """Every startup that reached its KV pool reconciles exactly with the release's rules (the budget line, the
    --kv-cache-memory suggestion, the blocks and tokens), both model runners; a failed one names its kind."""
    d = GPU / run
    meta = json.loads((d / "meta.json").read_text())
    s = analyze([str(d / "log.txt")], model=str(d / "config.json")).startups[-1]
    if (meta.get("observed") or {}).get("kv_tokens"):
        assert s.capacity.kv_tokens == meta["observed"]["kv_tokens"]
        assert s.reconciliation is not None and s.reconciliation.consistent, s.reconciliation.detail
    else:
        assert s.failure is not None and s.failure.kind in ("max-len-too-large", "not-enough-memory",
                                                            "multi-instance-contention", "weights-oom"), run


# sibling → (the change whatif is asked, the most it may miss by): the profile's batch limits and eager mode, from the
# default run calibrated with its config.json; torch.compile's cold/warm peak (1.78 vs 1.72 GiB) is ~480 tokens
KNOB_SIBLINGS = {"005-": ({"enforce_eager": True}, 0.001), "006-": ({"max_num_seqs": 64}, 0.0),
                 "020-": ({"max_num_seqs": 16}, 0.0), "021-": ({"max_num_seqs": 512}, 0.001),
                 "022-": ({"max_num_batched_tokens": 2048}, 0.001), "026-": ({"max_num_batched_tokens": 16384}, 0.001),
                 "007-": ({"block_size": 32}, 0.0), "024-": ({"block_size": 64}, 0.001)}


# (calibration run, sibling) → the most diff's prediction may miss by: the MoE (V1 runner, graph estimate charged) and
# the sliding-window model at another utilization, eager on MLA, and two changes at once (eager + fp8 KV) from the default
OTHER_PAIRS = {("009-", "028-"): 0.001, ("011-", "031-"): 0.001, ("010-", "030-"): 0.001, ("001-", "023-"): 0.001,
               ("005-", "023-"): 0.001,
               # an EAGLE-3 drafter added and removed: its weights, its prefill's share of the profile peak (0.50 GiB
               # by vLLM 0.26's V2 rule, 0.54 measured: the 0.04 left is ~310 tokens) and a 33rd KV layer
               ("001-", "035-"): 0.0005, ("035-", "001-"): 0.0005,
               # hybrid models on the V1 runner: Qwen3.5-27B (Gated DeltaNet) at 0.7 (a run that failed after its pool)
               # and with fp8 KV (the 784-token block doubles to 1,568), Nemotron-H both ways between 0.9 and 0.7
               ("041-", "043-"): 0.0, ("041-", "045-"): 0.001, ("049-", "044-"): 0.0, ("044-", "049-"): 0.0,
               # max_num_seqs 1,024 → 891 on the hybrid: the V1 sampler's 14 B per logit (0.43 GiB) moves the peak
               ("043-", "046-"): 0.0}


@pytest.mark.parametrize("pair", sorted(OTHER_PAIRS))
def test_diff_predicts_the_other_models_siblings(pair):
    base, sibling = pair
    d = diff(_run(base), _run(sibling))
    assert d.explained_tokens == d.observed_tokens
    assert d.predicted is not None, d
    assert abs(d.predicted.error) <= OTHER_PAIRS[pair], d.predicted


@pytest.mark.parametrize("sibling", sorted(KNOB_SIBLINGS))
def test_whatif_predicts_the_batch_eager_and_block_siblings(sibling):
    from kvscope.engines.vllm.whatif import calibrate, predict

    base_dir = next(GPU.glob(f"{BASE}*"))
    base = analyze([str(base_dir / "log.txt")], model=str(base_dir / "config.json")).startups[-1]
    changes, tolerance = KNOB_SIBLINGS[sibling]
    observed = _run(sibling).capacity.kv_tokens
    sc = predict(calibrate(base), changes)
    error = min(abs(sc.kv_tokens_low - observed), abs(sc.kv_tokens_high - observed)) / observed
    assert error <= tolerance, (changes, sc.kv_tokens_low, sc.kv_tokens_high, observed)


def test_a_drafter_added_is_priced_from_its_parts():
    """whatif from the run without a drafter, asked for run 035's EAGLE-3 head (its config.json given): the 0.55 GiB of
    weights a dummy-loaded head keeps (no embedding, no lm_head of its own), a 0.50 GiB larger profile peak and
    4,096 B more KV per token (the head's one layer: 8 KV heads × 128 × 2 × bf16)."""
    from kvscope.engines.vllm.whatif import calibrate, predict

    base_dir, draft_dir = next(GPU.glob(f"{BASE}*")), next(GPU.glob("035-*"), None)
    if draft_dir is None or not (draft_dir / "draft_config.json").is_file():
        pytest.skip("no drafter truth run here")
    base = analyze([str(base_dir / "log.txt")], model=str(base_dir / "config.json")).startups[-1]
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "model": str(draft_dir / "draft_config.json")}
    sc = predict(calibrate(base), {"speculative_config": spec})
    note = next(n for n in sc.notes if n.startswith("no drafter → drafter eagle3"))
    assert "weights +0.55 GiB" in note and "profile peak +0.50 GiB" in note and "+4,096 B of KV per token" in note
    observed = _run("035-").capacity.kv_tokens
    assert sc.kv_tokens_low <= observed * 1.0005 and sc.kv_tokens_high >= observed * 0.9995
    assert sc.flags == ["--speculative-config '" + json.dumps(spec) + "'"]



def test_a_cold_first_start_is_named_as_the_cause_of_its_smaller_pool():
    """042 and 049 are the same launch on the same machine; 042 compiled torch.compile inside its profile ("Compiling
    a graph for compile range"), 049 loaded the result ("Directly load the compiled graph(s)"). diff puts the 1.74 GiB
    of activation peak on that, not on a setting, and whatif is still asked about the settings (here: none)."""
    from kvscope.core.budget import TermKind

    cold, warm = _run("042-"), _run("049-")
    assert (cold.settings.get("compile_cache"), warm.settings.get("compile_cache")) == ("cold", "warm")
    d = diff(cold, warm)
    term = next(t for t in d.terms if t.kind is TermKind.ACTIVATION)
    assert term.gib == pytest.approx(1.74, abs=0.01) and term.cause == "compile_cache cold → warm"
    assert d.explained_tokens == d.observed_tokens == 292_392
