"""Build the SGLang 0.5.17 site-packages that the GPU machine needs, as xz chunks small enough to carry.

Run HERE (where PyPI is reachable), from the repository root:

    python3 benchmarks/gpu/sglang/build_bundle.py [--chunk-mib 50] [--work /tmp/kvs-sgl-build]

The lent H200 machine has Python 3.12.3, torch 2.11.0+cu130 and no network. SGLang 0.5.14-0.5.17 pin
torch==2.11.0 and sglang-kernel 0.4.5 links CUDA 13 (libcudart.so.13), so SGLang, its kernel package
(minus what one Hopper GPU never loads) and the small dependencies the machine lacks need to travel.
What this does:

1. ``pip download --no-deps`` SGLang 0.5.17 (cp312, manylinux_2_34) and the wheels in DEPS;
2. unzips every wheel into one site folder (dist-info included, so importlib.metadata sees the
   versions), leaving out STRIP: FA3 (``sgl_kernel/flash_ops.abi3.so``, 1.1 GB of the kernel
   wheel's 1.2 GB), the Blackwell build (``sgl_kernel/sm100/``), the cp310-only InfLLM extension,
   xgrammar's static library, SGLang's tests;
3. tars the site folder, ``xz -9e`` compresses it and splits it into chunks of --chunk-mib:
   ``.sglbundle/c1/part.00``, ``.sglbundle/c2/part.01``, ... (``.sglbundle/`` is ignored through
   .git/info/exclude), each folder with ``parts.sha256``, plus ``.sglbundle/manifest.json``.

One device call carries one chunk folder (``carry: [".sglbundle/c1"]``): the travelling working tree
is limited to 64 MiB per call, the repository (~7 MiB) included. benchmarks/gpu/sglang/device.sh
joins the parts there and unpacks the site folder (no pip run on the device: it is already laid out).

Not carried, on purpose (a stock install has them): FA3 (so every run passes --attention-backend
triton), flashinfer's prebuilt cubins/JIT cache (flashinfer-python itself travels, 15 MB; every run
passes --sampling-backend pytorch), sgl-deep-gemm, torchao, nvidia-cutlass-dsl, torch_memory_saver,
flash-attn-4, tilelang, quack-kernels: none is imported on the paths these runs take (the assemble
step's import check says so on the device).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from build_bundle import pip_download, sha256_file, xz_and_split  # noqa: E402  (benchmarks/gpu/build_bundle.py)

SGLANG = "sglang==0.5.17"

# Wheels the GPU image lacks (or holds at a version SGLang's pin refuses: transformers 5.17.0 and
# tokenizers 0.23.2 there, sglang 0.5.17 pins transformers==5.12.1) and that launch_server reaches on
# the path of these runs (HTTP server, tokenizer manager with skip_tokenizer_init, scheduler, model
# runner, triton attention, llama / qwen3_moe / deepseek_v2 / gemma2 models). The set is the one that
# started SGLang 0.5.17 on this machine before (shared/gpu-recipe/sglang), pinned to what pip chose.
DEPS = [
    "sglang-kernel==0.4.5", "flashinfer-python==0.6.15.post1",
    "transformers==5.12.1", "tokenizers==0.22.2",
    "openai==2.6.1", "xgrammar==0.2.1", "apache-tvm-ffi==0.1.11", "interegular==0.3.3",
    "pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0", "typing-inspection==0.4.5",
    "typing_extensions==4.16.0", "msgspec==0.23.0", "pyzmq==27.3.0", "pybase64==1.5.1",
    "fastapi==0.136.3", "starlette==1.10.0", "uvicorn==0.55.0", "python-multipart==0.0.34",
    "partial-json-parser==0.2.1.1.post7", "compressed-tensors==0.17.0", "loguru==0.7.3",
    "dill==0.4.1", "distro==1.9.0", "jiter==0.19.0", "sniffio==1.3.1",
    "orjson==3.13.0", "setproctitle==1.3.8", "zstandard==0.25.0", "gguf==0.19.0",
    "jsonschema==4.26.0", "jsonschema-specifications==2025.9.1", "referencing==0.37.0",
    "rpds-py==2026.9.1", "soundfile==0.14.0", "cffi==2.1.1", "pycparser==3.12",
    "ipython==9.18.1", "decorator==5.3.1", "ipython-pygments-lexers==1.1.1", "jedi==0.20.1",
    "matplotlib-inline==0.2.2", "pexpect==4.9.0", "prompt-toolkit==3.0.53", "stack-data==0.6.3",
    "traitlets==5.16.1", "parso==0.8.7", "wcwidth==0.9.4", "ptyprocess==0.7.0",
    "asttokens==3.0.2", "executing==2.3.0", "pure-eval==0.2.4",
]

STRIP_FILES = {
    "sgl_kernel/flash_ops.abi3.so",  # FA3, 1.1 GB: runs use --attention-backend triton
    "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so",  # built for CPython 3.10 only
    "xgrammar/lib/libxgrammar.a",  # static library, never loaded
}
STRIP_PREFIXES = (
    "sgl_kernel/sm100/",  # Blackwell build; Hopper loads sgl_kernel/sm90/common_ops.abi3.so
    "sglang/test/", "sglang/multimodal_gen/test/",
)


def dropped(name: str) -> bool:
    return name in STRIP_FILES or name.startswith(STRIP_PREFIXES) or "/__pycache__/" in name


def unpack(whl: str, site: str) -> tuple[int, int]:
    kept = drop = 0
    with zipfile.ZipFile(whl) as z:
        for info in z.infolist():
            if info.is_dir():
                continue
            if dropped(info.filename):
                drop += info.file_size
                continue
            kept += info.file_size
            dest = os.path.join(site, info.filename)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with z.open(info) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(dest, mode)
    return kept, drop


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/kvs-sgl-build")
    ap.add_argument("--out", default=".sglbundle")
    ap.add_argument("--chunk-mib", type=float, default=50.0)
    ap.add_argument("--xz-level", default="-9e")
    args = ap.parse_args()

    raw = os.path.join(args.work, "raw")
    site = os.path.join(args.work, "site")
    os.makedirs(raw, exist_ok=True)
    shutil.rmtree(site, ignore_errors=True)
    os.makedirs(site)
    pip_download(raw, [SGLANG] + DEPS)

    wanted = {s.split("==")[0].lower().replace("-", "_") for s in [SGLANG] + DEPS}
    sizes = {}
    for whl in sorted(os.listdir(raw)):
        if not whl.endswith(".whl") or whl.split("-")[0].lower() not in wanted:
            continue
        kept, drop = unpack(os.path.join(raw, whl), site)
        sizes[whl] = {"kept_bytes": kept, "dropped_bytes": drop}
        print(f"{whl}: {kept / 2**20:.1f} MiB kept, {drop / 2**20:.1f} MiB left out")

    tar_path = os.path.join(args.work, "site.tar")
    with tarfile.open(tar_path, "w") as tf:
        tf.add(site, arcname="site")
    xz_path, total, chunks = xz_and_split(tar_path, args.xz_level, args.out, args.chunk_mib)
    print(f"site.tar {os.path.getsize(tar_path) / 2**20:.1f} MiB -> xz {total / 2**20:.1f} MiB")
    manifest = {"sglang": SGLANG, "deps": DEPS, "wheels": sizes, "strip_files": sorted(STRIP_FILES),
                "strip_prefixes": list(STRIP_PREFIXES), "xz_bytes": total, "xz_sha256": sha256_file(xz_path),
                "chunks": chunks}
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    for c in chunks:
        print(f"{c['file']}: {c['bytes'] / 2**20:.1f} MiB {c['sha256'][:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
