"""How an engine lays a checkpoint out in memory, where engines differ (a record each engine owns).

Its own module, free of the weight estimator's imports, because every engine registers its record
at start-up and most runs never estimate weights."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WeightRules:
    """Where engines lay the same checkpoint out differently in memory (each engine owns its record:
    ``engines/<engine>/rules.py``), so the model layer computes bytes without knowing engine names."""

    label: str = "the engine"
    marlin_mxfp4_off_hopper: bool = False  # Marlin MoE (pads 128 / 256) where the GPU has no MXFP4 path
    copies_absorbed_mla: bool = False  # contiguous w_kc / w_vc copies even when kv_b_proj is not quantized
    keeps_fp32_mxfp4_scales_on_hopper: bool = False  # Marlin on SM 9.0 keeps the loader's float32 scales
    shards_moonvit_attention: bool = False  # MoonViT-style vision attention split over attention-TP


NEUTRAL_LAYOUT = WeightRules()  # no engine quirks: the checkpoint as the config describes it
