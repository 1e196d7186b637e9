#!/bin/bash
# Device side for SGLang 0.5.17, one call of the `run` tool, from the repository root:
#
#   bash benchmarks/gpu/sglang/device.sh DEADLINE_S [drive.py args...]
#
# 1. stage: copies the chunk this call carried (.sglbundle/c*/part.*) to /tmp/kvsg/stage;
# 2. unpack, once per machine, when every part parts.sha256 names is staged and checks out: joins
#    them and `xz -d | tar x` the site folder build_bundle.py laid out (no pip run: the wheels are
#    already unzipped), then imports the modules launch_server reaches on these runs' path;
# 3. run: drive.py starts the next configurations of configs.json while DEADLINE_S allows.
# A fresh machine has nothing under /tmp: a call then only stages what it carried (STAGED-ONLY).
set -u
T0=$(date +%s)
DEADLINE=${1:-540}; shift || true
K=/tmp/kvsg; SITE=$K/site
mkdir -p $K/stage
if [ ! -e $K/sanity.txt ]; then
  { nvidia-smi; python3 -c 'import torch,sys;print(sys.version);print("torch",torch.__version__,torch.version.cuda)';
    nproc; free -g; df -h /tmp; } > $K/sanity.txt 2>&1
  cat $K/sanity.txt
fi
for d in .sglbundle/c*; do
  [ -d "$d" ] || continue
  cp "$d"/part.* "$d"/parts.sha256 $K/stage/ && echo "staged $(ls "$d" | tr '\n' ' ')"
done
if [ ! -e $SITE/.unpacked ]; then
  if [ ! -e $K/stage/parts.sha256 ] || ! (cd $K/stage && sha256sum -c --quiet parts.sha256 2>/dev/null); then
    echo "STAGED-ONLY: have $(ls $K/stage | grep -c '^part\.') of $(wc -l < $K/stage/parts.sha256 2>/dev/null || echo '?') parts"
    exit 0
  fi
  t=$(date +%s)
  rm -rf $SITE
  cat $K/stage/part.* | xz -dc -T0 | tar x -C $K || { echo "UNPACK FAILED"; exit 3; }
  rm -f $K/stage/part.*
  PYTHONPATH=$SITE HF_HUB_OFFLINE=1 python3 - <<'PY' || { echo "IMPORT FAILED"; exit 5; }
import importlib
for m in ["sgl_kernel", "flashinfer", "sglang", "sglang.srt.server_args", "sglang.srt.entrypoints.http_server",
          "sglang.srt.managers.scheduler", "sglang.srt.model_executor.model_runner", "sglang.srt.models.llama",
          "sglang.srt.models.qwen3_moe", "sglang.srt.models.deepseek_v2", "sglang.srt.models.gemma2",
          "sglang.srt.models.llama_eagle3", "sglang.srt.layers.attention.triton_backend"]:
    mod = importlib.import_module(m)
    print("OK", m, getattr(mod, "__version__", ""))
PY
  touch $SITE/.unpacked
  echo "unpacked in $(( $(date +%s) - t ))s; $(du -sh $SITE | cut -f1)"
fi
export PYTHONPATH=$SITE
LEFT=$(( DEADLINE - ($(date +%s) - T0) ))
python3 benchmarks/gpu/sglang/drive.py --deadline-s $LEFT --out "$OUT" "$@"
