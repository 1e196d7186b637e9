"""An out of memory after the log printed the KV pool is not a weights out of memory: the weights were in before
the pool was sized. Found on tests/fixtures/pairs/011 (vllm-project/vllm#7256): V0 prints '# GPU blocks: 7823',
then a forward pass (F.linear) runs out of memory; no rank line gives the weights, which once made it
'weights-oom'."""

from __future__ import annotations

from kvscope.analysis.answer import contract_kind
from kvscope.api import read_logs
from tests.conftest import FIXTURES


def test_out_of_memory_after_the_gpu_blocks_line_is_not_weights_oom():
    log = next((FIXTURES / "pairs").glob("011-*")) / "b.txt"
    (s,) = read_logs([str(log)])
    assert s.capacity.num_gpu_blocks == 7823
    assert contract_kind(s) not in (None, "weights-oom")
