"""llama.cpp line shapes no fixture covers yet, quoted from public logs (sources in each test's docstring)."""

from __future__ import annotations

import pytest

from kvscope.api import analyze
from kvscope.core import events as ev
from kvscope.engines.base import LineContext
from kvscope.engines.llamacpp.lines import LlamaCppLines, device_label

P = LlamaCppLines()


def parse(text: str, ctx: LineContext | None = None):
    return P.parse(text, ctx or LineContext())


def _write(tmp_path, text: str) -> str:
    path = tmp_path / "server.log"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("buffer", "rank"),
    [("CUDA0", "CUDA0"), ("ROCm1", "ROCm1"), ("Vulkan0", "Vulkan0"), ("Metal", "Metal"), ("Metal_Mapped", "Metal"),
     ("CUDA_Host", "CPU"), ("ROCm_Host", "CPU"), ("Vulkan_Host", "CPU"), ("CPU_Mapped", "CPU"), ("CPU_REPACK", "CPU"),
     ("CPU", "CPU"), ("CUDA_Split", "CUDA_Split")],
)
def test_buffer_names_map_to_devices(buffer, rank):
    assert device_label(buffer) == rank


def test_iswa_gpt_oss_two_caches(tmp_path):
    """gpt-oss on Vulkan (ggml-org/llama.cpp#16188, build 6182): one non-SWA and one SWA cache, each with a
    buffer line and a summary line — neither may be counted twice, and the SWA one is named ``swa``."""
    log = "\n".join([
        "build: 6182 (1fe00296f) with cc (GCC) 15.2.1 20250808 (Red Hat 15.2.1-1) for aarch64-redhat-linux",
        "llama_model_load_from_file_impl: using device Vulkan0 (Apple M2 Pro (G14S B1)) - 7789 MiB free",
        "llama_model_loader: loaded meta data with 35 key-value pairs and 459 tensors from ./gpt-oss-20b-mxfp4.gguf (version GGUF V3 (latest))",
        "print_info: n_layer          = 24",
        "print_info: n_embd_k_gqa     = 512",
        "print_info: n_embd_v_gqa     = 512",
        "load_tensors: offloaded 24/25 layers to GPU",
        "load_tensors:      Vulkan0 model buffer size =  4699.90 MiB",
        "load_tensors:   CPU_Mapped model buffer size =  7218.45 MiB",
        "llama_context: n_seq_max     = 1",
        "llama_context: n_ctx         = 4096",
        "llama_context: n_ctx_per_seq = 4096",
        "llama_context: n_ubatch      = 512",
        "llama_context: kv_unified    = false",
        "llama_context: n_ctx_per_seq (4096) < n_ctx_train (131072) -- the full capacity of the model will not be utilized",
        "llama_context:        CPU  output buffer size =     0.77 MiB",
        "llama_kv_cache_unified_iswa: creating non-SWA KV cache, size = 4096 cells",
        "llama_kv_cache_unified:    Vulkan0 KV buffer size =    96.00 MiB",
        "llama_kv_cache_unified: size =   96.00 MiB (  4096 cells,  12 layers,  1/1 seqs), K (f16):   48.00 MiB, V (f16):   48.00 MiB",
        "llama_kv_cache_unified_iswa: creating     SWA KV cache, size = 640 cells",
        "llama_kv_cache_unified:    Vulkan0 KV buffer size =    15.00 MiB",
        "llama_kv_cache_unified: size =   15.00 MiB (   640 cells,  12 layers,  1/1 seqs), K (f16):    7.50 MiB, V (f16):    7.50 MiB",
        "llama_context:    Vulkan0 compute buffer size =   985.20 MiB",
        "llama_context: Vulkan_Host compute buffer size =    58.33 MiB",
    ])
    [s] = analyze([_write(tmp_path, log)]).startups
    gpu = next(r for r in s.ranks if r.rank == "Vulkan0")
    assert gpu.pool("target").gib == 96 / 1024 and gpu.pool("target").tokens == 4096
    assert gpu.pool("swa").gib == 15 / 1024 and gpu.pool("swa").tokens == 640
    assert len(gpu.kv_pools) == 2
    assert gpu.weights_gib == 4699.90 / 1024
    assert gpu.pre_load_free_gib == 7789 / 1024
    assert next(r for r in s.ranks if r.rank == "CPU").weights_gib == 7218.45 / 1024
    assert s.capacity.kv_tokens == 4096 and s.capacity.context_len == 4096
    assert s.settings["n_gpu_layers_offloaded"] == 24 and s.model == "./gpt-oss-20b-mxfp4.gguf"
    assert s.engine_version == "6182 (1fe00296f)"
    # 12 layers carry this cache: 4096 × 12 × 512 × 2 B = 48 MiB for K and for V — checked to the printed digit
    assert s.reconciliation.bytes_per_token == 12 * 512 * 2 * 2
    assert s.reconciliation.consistent is True
    assert any(f.code == "llamacpp-partial-offload" and f.suggestion.to_value == 25 for f in s.findings)


def test_memory_breakdown_at_exit_gives_device_total(tmp_path):
    """llama_memory_breakdown_print (newer llama-server, printed on exit)."""
    log = "\n".join([
        "llama_kv_cache:      CUDA0 KV buffer size =   384.00 MiB",
        "llama_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |",
        "llama_memory_breakdown_print: |   - CUDA0 (RTX 4090)   | 24077 =  945 + (19187 = 17904 +     384 +     898) +        3945 |",
    ])
    [s] = analyze([_write(tmp_path, log)]).startups
    gpu = s.ranks[0]
    assert gpu.rank == "CUDA0" and gpu.total_gib == 24077 / 1024
    assert gpu.extras["breakdown_mib"]["compute"] == 898 and gpu.extras["gpu_name"] == "RTX 4090"


def test_2023_kv_self_size_in_mb():
    """Before ggml-backend buffers (mid-2023): 'MB' figures that were always bytes / 2^20."""
    out = parse("llama_new_context_with_model: kv self size  = 1024.00 MB")
    assert out[0].kind == ev.POOL and out[0].data["gib"] == 1.0
    out = parse("llama_kv_cache_init: VRAM kv self = 256.00 MB")
    assert out[0].rank == "GPU" and out[0].data["gib"] == 0.25


@pytest.mark.parametrize(
    ("line", "kind", "data"),
    [
        ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 7000.00 MiB on device 0: cudaMalloc failed: out of memory",
         "not-enough-memory", {"alloc_mib": 7000.0, "device": "CUDA0"}),
        ("alloc_tensor_range: failed to allocate CUDA0 buffer of size 7340032000", "weights-oom",
         {"alloc_bytes": 7340032000, "device": "CUDA0"}),
        ("llama_kv_cache_init: failed to allocate buffer for kv cache", "kv-cache-oom", {}),
        ("ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 9332334592", "compute-buffer-oom",
         {"alloc_bytes": 9332334592}),
        ("llama_init_from_model: failed to initialize the context: failed to allocate compute pp buffers",
         "compute-buffer-oom", {}),
    ],
)
def test_failure_lines(line, kind, data):
    [p] = parse(line)
    assert p.kind == ev.FAILURE and p.data["kind"] == kind
    for k, v in data.items():
        assert p.data[k] == v


def test_new_model_load_after_a_context_is_a_new_startup(tmp_path):
    """Two runs pasted into one file without build lines: the second loader line starts a new startup,
    while a draft model announced by the server stays in the same one."""
    run = ["llama_model_loader: loaded meta data with 19 key-value pairs and 291 tensors from /m/a.gguf (version GGUF V3 (latest))",
           "llama_new_context_with_model: n_ctx      = 2048",
           "llama_kv_cache_init:      CUDA0 KV buffer size =   256.00 MiB"]
    assert len(analyze([_write(tmp_path, "\n".join(run + run))]).startups) == 2
    draft = run + ["srv    load_model: loading draft model '/m/draft.gguf'",
                   "llama_model_loader: loaded meta data with 19 key-value pairs and 201 tensors from /m/draft.gguf",
                   "llama_kv_cache_init:      CUDA0 KV buffer size =    16.00 MiB"]
    [s] = analyze([_write(tmp_path, "\n".join(draft))]).startups
    gpu = s.ranks[0]
    assert gpu.pool("target").gib == 0.25 and gpu.pool("draft").gib == 16 / 1024


def test_ik_split_mode_graph_per_device_list(tmp_path):
    """ik_llama.cpp split mode graph: one CUDA_Split buffer, then the per-device shares (src/llama.cpp format)."""
    log = "\n".join([
        "llama_kv_cache_init: CUDA_Split KV buffer size = 14632.83 MiB",
        "llama_kv_cache_init: KV cache size per device:",
        "    Device 0:  7316.41 MiB",
        "    Device 1:  7316.41 MiB",
        "llama_new_context_with_model: KV self size  = 14632.75 MiB, K (q8_0): 7316.38 MiB, V (q8_0): 7316.38 MiB",
    ])
    [s] = analyze([_write(tmp_path, log)]).startups
    shares = {r.rank: r.extras.get("kv_split_gib") for r in s.ranks}
    assert shares["CUDA0"] == shares["CUDA1"] == 7316.41 / 1024
    split = next(r for r in s.ranks if r.rank == "CUDA_Split")
    assert split.pool("target").gib == 14632.75 / 1024  # the shares are ledger rows, not a second pool
    assert all(not r.kv_pools for r in s.ranks if r.rank != "CUDA_Split")


def test_whole_cache_rank_is_not_an_oversized_gpu(tmp_path):
    """A cache spread over 8 GPUs can exceed one GPU; --assume gpu must not call that inconsistent."""
    log = "\n".join([f"llama_kv_cache_init:      CUDA{i} KV buffer size = 12288.00 MiB" for i in range(8)]
                    + ["llama_new_context_with_model: KV self size  = 98304.00 MiB, K (f16): 49152.00 MiB, V (f16): 49152.00 MiB"])
    [s] = analyze([_write(tmp_path, log)], {"gpu": "RTX 4090"}).startups
    assert next(r for r in s.ranks if r.rank == "(all devices)").pool("target").gib == 96.0
    assert not any(f.code == "log-inconsistent" for f in s.findings)


@pytest.mark.parametrize(
    ("line", "settings"),
    [
        # llama-server 2026, compact format (a public log of b10xxx at -lv 4)
        ("0.07.146.887 I slot   load_model: id  0 | task -1 | new slot, n_ctx = 8192", {"n_ctx_slot": 8192}),
        ("srv  load_model: initializing, n_slots = 4, n_ctx_slot = 8192, kv_unified = 'true'",
         {"n_slots": 4, "n_ctx_slot": 8192, "kv_unified": True}),
        # llama-server 2024-2025
        ("slot         init: id  0 | task -1 | new slot n_ctx_slot = 131072", {"n_ctx_slot": 131072}),
        ("srv          init: initializing slots, n_slots = 1", {"n_slots": 1}),
        # ik_llama.cpp / 2024 server
        ('INFO [                    init] initializing slots | tid="22970858381312" timestamp=1740670875 n_slots=1',
         {"n_slots": 1}),
    ],
)
def test_slot_lines_every_era(line, settings):
    [p] = parse(line)
    assert p.kind == ev.SETTINGS and p.data == settings


def test_slot_capped_to_training_context():
    out = parse("slot context (131072) exceeds the training context of the model (32768) - capping")
    assert out[0].data["code"] == "slot-context-capped" and out[1].data == {"n_ctx_train": 32768}
