"""llama.cpp's KV sizing rule: bytes = cells × Σ_layers (n_embd_k_gqa × size(type_k) + n_embd_v_gqa × size(type_v)).

ggml types are stored in blocks: f16 is 2 bytes per element, q8_0 packs 32 elements in 34 bytes,
q4_0 in 18. The printed MiB figures have two decimals, so every printed x stands for
[x − 0.005, x + 0.005] MiB; checks below carry that half unit instead of comparing rounded floats.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20
HALF_CENT_MIB = 0.005

# ggml type → (bytes per block, elements per block)
TYPE_BLOCKS: dict[str, tuple[int, int]] = {
    "f32": (4, 1),
    "f16": (2, 1),
    "bf16": (2, 1),
    "q8_0": (34, 32),
    "q8_1": (36, 32),
    "q6_0": (26, 32),
    "q5_0": (22, 32),
    "q5_1": (24, 32),
    "q4_0": (18, 32),
    "q4_1": (20, 32),
    "iq4_nl": (18, 32),
}


def type_size(name: str | None) -> float | None:
    """Bytes per element of a ggml KV type (q8_0 → 34/32); None when kvscope does not know the type."""
    block = TYPE_BLOCKS.get((name or "").lower())
    return None if block is None else block[0] / block[1]


@dataclass
class CacheShape:
    """What decides one KV cache's size, and where each figure came from."""

    layers: int
    n_embd_k_gqa: int
    n_embd_v_gqa: int
    source: str

    def bytes_per_token(self, type_k: str, type_v: str) -> float | None:
        tk, tv = type_size(type_k), type_size(type_v)
        if tk is None or tv is None:
            return None
        return self.layers * (self.n_embd_k_gqa * tk + self.n_embd_v_gqa * tv)

    def k_mib(self, cells: int, type_k: str) -> float | None:
        tk = type_size(type_k)
        return None if tk is None else cells * self.layers * self.n_embd_k_gqa * tk / MIB

    def v_mib(self, cells: int, type_v: str) -> float | None:
        tv = type_size(type_v)
        return None if tv is None else cells * self.layers * self.n_embd_v_gqa * tv / MIB


def printed_matches(predicted_mib: float, printed_mib: float) -> bool:
    """True when a predicted MiB figure rounds to what the log printed (two decimals)."""
    return abs(predicted_mib - printed_mib) <= HALF_CENT_MIB + 1e-9


def elements_per_token(printed_mib: float, cells: int, type_name: str) -> tuple[float, float] | None:
    """(elements per token summed over layers, ± uncertainty) implied by a printed K or V size."""
    size = type_size(type_name)
    if size is None or cells <= 0:
        return None
    return printed_mib * MIB / cells / size, HALF_CENT_MIB * MIB / cells / size


def whole_blocks(elements: float, spread: float, type_name: str) -> bool | None:
    """Does the implied element count fall on a whole number of the type's blocks?

    None when the printed rounding is too coarse for the check to mean anything (small contexts).
    """
    block = TYPE_BLOCKS.get(type_name.lower(), (0, 1))[1]
    if spread >= block / 4:
        return None
    nearest = round(elements / block) * block
    return abs(elements - nearest) <= spread + 1e-6


def tokens_for_bytes(total_mib: float, bytes_per_token: float) -> tuple[int, int]:
    """Token counts whose K+V size prints as total_mib (inclusive range)."""
    low = (total_mib - HALF_CENT_MIB) * MIB / bytes_per_token
    high = (total_mib + HALF_CENT_MIB) * MIB / bytes_per_token
    return int(low) + (0 if low == int(low) else 1), int(high)
