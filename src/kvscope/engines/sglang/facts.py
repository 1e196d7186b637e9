"""SGLang's facts beyond the contract fields (``core/facts.py`` says why they are views over one store)."""

from __future__ import annotations

from kvscope.core import facts
from kvscope.core.facts import Fact


class _Dsv4Facts(facts.Facts):
    """DeepSeek-V4's compressed pools, as its sizing line prints them (a rank's, copied to the capacity)."""

    __slots__ = ()
    dsv4_available_gib: Fact[float] = Fact()
    dsv4_bytes_per_full_token: Fact[float] = Fact("bytes one full-attention token costs over every pool")
    dsv4_full_tokens: Fact[int] = Fact()
    dsv4_swa_tokens: Fact[int] = Fact()
    dsv4_c4_tokens: Fact[int] = Fact()
    dsv4_c128_tokens: Fact[int] = Fact()
    dsv4_c4_state_tokens: Fact[int] = Fact()
    dsv4_c128_state_tokens: Fact[int] = Fact()
    dsv4_c128_state_fixed_gib: Fact[float] = Fact()
    dsv4_swa_fixed_gib: Fact[float] = Fact()
    dsv4_pool_derived: Fact[str] = Fact()


class SGLangRankFacts(facts.RankFacts, _Dsv4Facts):
    __slots__ = ()
    dsv4_sizes_full_tokens: Fact[int] = Fact("scratch: 'DSV4 pool sizes' full tokens, folded into dsv4_full_tokens")
    weights_dtype: Fact[str] = Fact()
    weights_quant: Fact[str] = Fact()
    model_class: Fact[str] = Fact()
    load_seconds: Fact[float] = Fact()
    init_mem_usage_gib: Fact[float] = Fact()
    basis_gib: Fact[tuple[float, float]] = Fact(
        "budget basis F (GiB) as the pool implies it, where the printed 'Load weight begin' figure is read after "
        "the engine measured F: (low, high)")
    multimodal_reserve_gib: Fact[float] = Fact()
    graph_capture_began: Fact[bool] = Fact()
    second_runner_began: Fact[bool] = Fact("a second model runner (a draft) began loading")


class SGLangCapacityFacts(facts.CapacityFacts, _Dsv4Facts):
    __slots__ = ()
    implied_mem_fraction_static: Fact[float] = Fact("the mem_fraction_static the pool's size implies")
    max_total_num_tokens_from: Fact[str] = Fact()
    kv_tokens_approx: Fact[int] = Fact()
    kv_tokens_as_printed: Fact[str] = Fact()
    full_layer_tokens: Fact[int] = Fact()
    swa_layer_tokens: Fact[int] = Fact()
    chunked_prefill_size: Fact[int] = Fact()
    max_prefill_tokens: Fact[int] = Fact()
    gpu_id: Fact[int] = Fact()
