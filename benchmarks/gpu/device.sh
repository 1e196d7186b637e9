#!/bin/bash
# Device side, one call of the `run` tool, from the repository root on the GPU machine:
#
#   bash benchmarks/gpu/device.sh DEADLINE_S [drive.py args...]
#
# 1. stage: copies the chunk(s) this call carried (.gpubundle/c*/part.*) to /tmp/kvs/stage;
# 2. install, once per machine: when every part that parts.sha256 names is staged and checks out,
#    joins them, xz -d | tar x the wheelhouse and `pip install --no-index --no-deps --target
#    /tmp/kvs/site` every wheel in it, then checks that vLLM imports;
# 3. run: drive.py runs the next configurations of configs.json while DEADLINE_S (counted from this
#    script's start) allows.
# A fresh machine has nothing under /tmp: a call then only stages what it carried, and says how many
# parts are still missing. So each call can re-stage if the machine was given back in between.
set -u
T0=$(date +%s)
DEADLINE=${1:-540}; shift || true
K=/tmp/kvs; SITE=$K/site
mkdir -p $K/stage
if [ ! -e $K/sanity.txt ]; then
  { nvidia-smi; python3 -c 'import torch,sys;print(sys.version);print("torch",torch.__version__,torch.version.cuda)';
    nproc; free -g; df -h /tmp; } > $K/sanity.txt 2>&1
  cat $K/sanity.txt
fi
for d in .gpubundle/c*; do
  [ -d "$d" ] || continue
  cp "$d"/part.* "$d"/parts.sha256 $K/stage/ && echo "staged $(ls "$d" | tr '\n' ' ')"
done
if [ ! -e $SITE/.installed ]; then
  if [ ! -e $K/stage/parts.sha256 ] || ! (cd $K/stage && sha256sum -c --quiet parts.sha256 2>/dev/null); then
    echo "STAGED-ONLY: have $(ls $K/stage | grep -c '^part\.') of $(wc -l < $K/stage/parts.sha256 2>/dev/null || echo '?') parts"
    exit 0
  fi
  t=$(date +%s)
  rm -rf $K/wheelhouse $SITE
  cat $K/stage/part.* | xz -dc -T0 | tar x -C $K || { echo "UNPACK FAILED"; exit 3; }
  rm -f $K/stage/part.*
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $SITE \
    $K/wheelhouse/*.whl || { echo "PIP INSTALL FAILED"; exit 4; }
  rm -rf $K/wheelhouse
  PYTHONPATH=$SITE python3 -c 'import vllm, vllm._C_stable_libtorch; print("vllm", vllm.__version__, "imports")' \
    || { echo "IMPORT FAILED"; exit 5; }
  touch $SITE/.installed
  echo "installed in $(( $(date +%s) - t ))s; $(du -sh $SITE | cut -f1)"
fi
export PYTHONPATH=$SITE
LEFT=$(( DEADLINE - ($(date +%s) - T0) ))
python3 benchmarks/gpu/drive.py --deadline-s $LEFT --out "$OUT" "$@"
