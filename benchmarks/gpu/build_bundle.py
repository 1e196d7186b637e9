# ruff: noqa: UP031  (device-side harness: log files stay open across the engine subprocess; best-effort cleanup)
"""Build the vLLM 0.26.0 wheelhouse that the GPU machine needs, as xz chunks small enough to carry.

Run HERE (where PyPI is reachable), from the repository root:

    python3 benchmarks/gpu/build_bundle.py [--chunk-mib 52] [--work /tmp/kvs-gpu-build]

The lent H200 machine has Python 3.12, torch 2.11.0+cu130 and no network. vLLM 0.26.0 pins
torch==2.11.0 and links CUDA 13, so only vLLM itself and the small pure/binary dependencies the
machine lacks need to travel. What this does:

1. ``pip download --no-deps`` the vLLM 0.26.0 wheel and the dependency wheels listed in DEPS
   (for cp312 / manylinux x86_64);
2. rewrites the vLLM wheel without what one Hopper (sm_90) GPU cannot need (STRIP), fixing its
   RECORD, and rewrites every wheel uncompressed (ZIP_STORED) so that xz sees raw bytes;
3. tars the wheelhouse, xz -9e compresses it and splits it into chunks of --chunk-mib, written to
   ``.gpubundle/c1/part.00``, ``.gpubundle/c2/part.01``, ... (``.gpubundle/`` is ignored through
   .git/info/exclude) with ``.gpubundle/manifest.json`` (sizes, sha256 of each chunk and of the whole).

One device call can carry one chunk folder (``carry: [".gpubundle/c1"]``): the travelling working
tree is limited to 64 MiB per call, chunks included. benchmarks/gpu/device.sh joins them on the
device and installs with ``pip install --no-index --no-deps --target``.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

VLLM = "vllm==0.26.0"

# Wheels the GPU machine's image lacks and that `vllm.LLM(...)` reaches on the offline path
# (engine core, V1/V2 model runners, dense, MoE, MLA and sliding-window models). The list and
# versions are those that started vLLM 0.26.0 there before (shared/gpu-recipe); kept pinned.
DEPS = [
    "pydantic==2.14.4", "pydantic-core==2.50.5", "annotated-types==0.8.0",
    "typing-inspection==0.4.5", "typing_extensions==4.16.0",
    "msgspec==0.23.0", "pyzmq==27.3.0", "cbor2==6.3.0", "pybase64==1.5.1",
    "cachetools==8.0.2", "openai-harmony==0.0.8", "openai==2.54.0", "distro==1.9.0",
    "jiter==0.19.0", "sniffio==1.3.1", "compressed-tensors==0.17.0", "loguru==0.7.3",
    "llguidance==1.7.6", "xgrammar==0.2.7", "apache-tvm-ffi==0.1.10",
    "fastapi==0.136.3", "starlette==1.10.0", "partial-json-parser==0.2.1.1.post7",
    "depyf==0.20.0", "astor", "dill",
]

# Parts of the vLLM wheel one H200 with FlashAttention 3 never loads.
STRIP_FILES = {
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",  # FA2 (pre-Hopper); FA3 stays
    "vllm/vllm-rs",  # the Rust front-end binary (serving), not the offline engine
    "vllm/third_party/deep_gemm/_C.cpython-310-x86_64-linux-gnu.so",
    "vllm/third_party/deep_gemm/_C.cpython-311-x86_64-linux-gnu.so",
    "vllm/third_party/deep_gemm/_C.cpython-313-x86_64-linux-gnu.so",
    "vllm/third_party/deep_gemm/_C.cpython-314-x86_64-linux-gnu.so",
}
STRIP_PREFIXES = (
    "vllm/third_party/fmha_sm100/",  # Blackwell-only attention
    "vllm/entrypoints/serve/instrumentator/static/",  # swagger UI for the HTTP server
)

PLATFORMS = ["manylinux_2_%d_x86_64" % n for n in (17, 24, 27, 28, 31, 34, 35, 36, 38, 39)] + [
    "manylinux2014_x86_64", "manylinux1_x86_64", "any"]


def pip_download(dest: str, specs: list[str]) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "-d", dest]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    subprocess.run(cmd + specs, check=True)


def record_hash(data: bytes) -> str:
    import base64
    d = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={d}"


def rewrite_wheel(src: str, dst: str, drop=lambda name: False) -> tuple[int, int]:
    """Copy a wheel uncompressed, leaving out the members `drop` names; RECORD follows."""
    kept = dropped = 0
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        record_name = None
        for info in zin.infolist():
            if info.filename.endswith(".dist-info/RECORD"):
                record_name = info.filename
                continue
            if drop(info.filename):
                dropped += info.file_size
                continue
            kept += info.file_size
            info2 = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            info2.external_attr = info.external_attr
            info2.compress_type = zipfile.ZIP_STORED
            zout.writestr(info2, zin.read(info))
        if record_name:
            rows = list(csv.reader(io.StringIO(zin.read(record_name).decode())))
            out = io.StringIO()
            w = csv.writer(out, lineterminator="\n")
            for row in rows:
                if row and not drop(row[0]):
                    w.writerow(row)
            zout.writestr(record_name, out.getvalue())
    return kept, dropped


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def xz_and_split(tar_path: str, xz_level: str, out: str, chunk_mib: float) -> tuple[str, int, list[dict]]:
    """xz the tarball, then split it into OUT/c1/part.00, OUT/c2/part.01, ... of chunk_mib each (one chunk per
    device call: the travelling tree is limited to 64 MiB), every folder with parts.sha256 naming all parts.
    Returns (the .xz path, its size, the chunks)."""
    xz_path = tar_path + ".xz"
    if os.path.exists(xz_path):
        os.remove(xz_path)
    subprocess.run(["xz", "-T0", xz_level, "-k", tar_path], check=True)
    shutil.rmtree(out, ignore_errors=True)
    chunk = int(chunk_mib * 2**20)
    chunks = []
    with open(xz_path, "rb") as f:
        i = 0
        while data := f.read(chunk):
            d = os.path.join(out, f"c{i + 1}")
            os.makedirs(d, exist_ok=True)
            p = os.path.join(d, f"part.{i:02d}")
            with open(p, "wb") as g:
                g.write(data)
            chunks.append({"dir": d, "file": p, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
            i += 1
    sums = "".join(f"{c['sha256']}  {os.path.basename(c['file'])}\n" for c in chunks)
    for c in chunks:  # every chunk folder says how many parts make the whole
        with open(os.path.join(c["dir"], "parts.sha256"), "w") as g:
            g.write(sums)
    return xz_path, os.path.getsize(xz_path), chunks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/kvs-gpu-build")
    ap.add_argument("--out", default=".gpubundle")
    ap.add_argument("--chunk-mib", type=float, default=52.0)
    ap.add_argument("--xz-level", default="-9e")
    args = ap.parse_args()

    raw = os.path.join(args.work, "raw")
    house = os.path.join(args.work, "wheelhouse")
    os.makedirs(raw, exist_ok=True)
    shutil.rmtree(house, ignore_errors=True)
    os.makedirs(house)
    pip_download(raw, [VLLM] + DEPS)

    def drop_vllm(name: str) -> bool:
        return (name in STRIP_FILES or name.startswith(STRIP_PREFIXES)
                or "/__pycache__/" in name)

    sizes = {}
    for whl in sorted(os.listdir(raw)):
        if not whl.endswith(".whl"):
            continue
        is_vllm = whl.startswith("vllm-")
        kept, dropped = rewrite_wheel(os.path.join(raw, whl), os.path.join(house, whl),
                                      drop_vllm if is_vllm else (lambda n: False))
        sizes[whl] = {"kept_bytes": kept, "dropped_bytes": dropped}
        print(f"{whl}: {kept / 2**20:.1f} MiB kept, {dropped / 2**20:.1f} MiB stripped")

    tar_path = os.path.join(args.work, "wheelhouse.tar")
    with tarfile.open(tar_path, "w") as tf:
        tf.add(house, arcname="wheelhouse")
    xz_path, total, chunks = xz_and_split(tar_path, args.xz_level, args.out, args.chunk_mib)
    print(f"wheelhouse.tar {os.path.getsize(tar_path) / 2**20:.1f} MiB -> xz {total / 2**20:.1f} MiB")
    manifest = {"vllm": VLLM, "deps": DEPS, "wheels": sizes, "xz_bytes": total,
                "xz_sha256": sha256_file(xz_path), "chunks": chunks}
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    for c in chunks:
        print(f"{c['file']}: {c['bytes'] / 2**20:.1f} MiB {c['sha256'][:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
