"""llama.cpp's whatif on real logs: the cache of another -c, -ctk/-ctv, -np is the logged one re-counted, so a run
with another -c from the same poster is predicted to the MiB it printed."""

from __future__ import annotations

import pytest

from kvscope.api import analyze
from kvscope.engines.llamacpp import whatif
from kvscope.engines.whatif_base import PredictionError
from kvscope.examples import example_path
from tests.conftest import FIXTURES

PAIR = FIXTURES / "pairs" / "005-llamacpp-server-nctx-2048-vs-32768-diff"
MIB = 1 << 20
GIB = 1 << 30


def _cal(path):
    return whatif.calibrate(analyze([str(path)]).startups[-1])


def test_another_context_is_predicted_to_the_printed_mib():
    """The poster's -c 2048 run predicts their -c 32768 run: 4096.00 MiB of KV on CUDA0, as printed."""
    cal = _cal(PAIR / "a.txt")
    after = whatif.kv_after(cal, {"n_ctx": 32768})
    assert after["CUDA0"] * GIB / MIB == pytest.approx(4096.00, abs=0.005)
    sc = whatif.predict(cal, {"c": 32768})
    assert sc.kv_tokens == 32768 and sc.flags == ["-c 32768"]


def test_a_quantized_cache_costs_its_block_bytes():
    """f16 → q8_0 on the LLamaSharp example: 34 bytes per 32 elements instead of 64."""
    cal = _cal(example_path("llamacpp-kv-cache")[1])
    before = sum(cal.kv_gib.values())
    after = sum(whatif.kv_after(cal, {"type_k": "q8_0", "type_v": "q8_0"}).values())
    assert after == pytest.approx(before * 34 / 64)
    assert whatif.predict(cal, {"np": 4}).context_tokens == 1024  # the same cells in four sequences


def test_an_unknown_cache_type_is_refused():
    with pytest.raises(PredictionError, match="not one kvscope knows"):
        whatif.predict(_cal(PAIR / "a.txt"), {"ctk": "fp7"})


def test_offloading_fewer_layers_moves_their_kv_to_the_host():
    cal = _cal(FIXTURES / "harvested" / "llamacpp" / "108-llamacpp-8gpu-nseq8-k-q4_0-v-f16-partial" / "log.txt")
    total = sum(cal.kv_gib.values())
    after = whatif.kv_after(cal, {"n_gpu_layers": 30})
    assert sum(after.values()) == pytest.approx(total)
    assert after["CPU"] == pytest.approx(total * (cal.n_layer - 30) / cal.n_layer)
