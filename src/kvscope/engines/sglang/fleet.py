"""SGLang's Prometheus metrics (``--enable-metrics``) as ``kvscope fleet`` reads them. Each scheduler
exports its own series: DP ranks (``dp_rank``) and pipeline stages have their own pools; TP and EP ranks of one
scheduler repeat its numbers (``tp_rank``, ``moe_ep_rank``), so only the lowest is read."""

from __future__ import annotations

from kvscope.engines.base import FleetMetrics

FLEET = FleetMetrics(
    usage=("sglang:token_usage",),
    waiting=("sglang:num_queue_reqs", "sglang:num_requests_waiting"),  # renamed around 0.4
    running=("sglang:num_running_reqs", "sglang:num_requests_running"),
    preemptions=("sglang:num_retractions_sum",),  # the retraction histogram's sum: requests retracted so far
    preemption_gauges=("sglang:num_retracted_reqs",),
    prefix_hits=("sglang:cached_tokens_total",),
    prefix_queries=("sglang:prompt_tokens_total",),
    hit_rate=("sglang:cache_hit_rate",),  # a percentage before 0.4, a fraction since
    capacity_tokens=("sglang:max_total_num_tokens",),
    used_tokens=("sglang:num_used_tokens",),  # releases that export no max_total_num_tokens: pool ≈ used / usage
    scheduler_labels=("dp_rank", "pp_rank"),
    repeat_labels=("tp_rank", "moe_ep_rank"),
)
