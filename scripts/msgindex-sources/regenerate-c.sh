#!/bin/bash
# Regenerate scripts/msgindex-sources/c-templates.jsonl.gz from the real sources.
# Needs: the git mirrors of NVIDIA/nccl, flashinfer-ai/flashinfer, Project-HAMi/HAMi-core
# (NCCL_GIT, FLASHINFER_GIT, HAMI_GIT: git dirs), pip (PyPI), the CUDA 13 runtime in CUDA13_DIR
# (the nvidia-cuda-runtime wheel's include/ and lib/). Work files go to WORK (default a temp dir).
# NCCL_TAGS, FI_TAGS, TORCH_CUDA, TORCH_CPU and OUT may be set to run on fewer inputs.
set -euo pipefail
: "${NCCL_GIT:?git dir of NVIDIA/nccl}" "${FLASHINFER_GIT:?}" "${HAMI_GIT:?}"
CUDA13_DIR=${CUDA13_DIR:-/usr/local/cuda}
WORK=${WORK:-$(mktemp -d)}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python}
NCCL_TAGS="${NCCL_TAGS:-v2.18.6-1 v2.19.4-1 v2.20.5-1 v2.21.5-1 v2.22.3-1 v2.23.4-1 v2.24.3-1 v2.25.1-1 v2.26.6-1 v2.27.7-1 v2.28.9-1 v2.29.7-1 v2.30.7-1}"
FI_TAGS="${FI_TAGS:-v0.2.5 v0.3.1 v0.4.1 v0.5.3 v0.6.17}"
TORCH_CUDA="${TORCH_CUDA:-2.4.0 2.6.0 2.8.0 2.9.1 2.10.0 2.12.1 2.14.1}"   # PyPI's default (CUDA) Linux builds
TORCH_CPU=${TORCH_CPU:-2.13.0}   # the +cpu build installed beside $PYTHON (the dev venv's)
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64"
args=()
for t in $NCCL_TAGS; do
  d=$WORK/nccl-$t; mkdir -p "$d"; git -C "$NCCL_GIT" archive "$t" src | tar -x -C "$d"
  v=${t#v}; args+=(--source "nccl@${v%-1}=$d")
done
for t in $FI_TAGS; do
  d=$WORK/fi-$t; mkdir -p "$d"; git -C "$FLASHINFER_GIT" archive "$t" csrc include | tar -x -C "$d"
  args+=(--source "flashinfer@${t#v}=$d")
done
h=$(git -C "$HAMI_GIT" rev-parse --short=7 HEAD)
mkdir -p "$WORK/hami"; git -C "$HAMI_GIT" archive HEAD src | tar -x -C "$WORK/hami"
args+=(--source "hami@git-$h=$WORK/hami")
torch_subset() {  # $1 wheel, $2 dest: the c10d/c10 headers and the three libraries
  (cd "$2" && unzip -q -o "$1" 'torch/lib/libtorch_cuda.so' 'torch/lib/libtorch_cpu.so' \
     'torch/lib/libc10_cuda.so' 'torch/include/torch/csrc/distributed/*' 'torch/include/c10/util/*' \
     'torch/include/c10/cuda/*' 'torch/include/torch/csrc/cuda/*' || true)
}
for v in $TORCH_CUDA; do
  d=$WORK/torch-$v; mkdir -p "$d/whl"
  pip download -q --no-deps -d "$d/whl" "torch==$v" --only-binary :all: $PLAT --python-version 3.12
  torch_subset "$(ls "$d"/whl/*.whl)" "$d"; rm -rf "$d/whl"
  args+=(--source "torch@$v=$d/torch/include")
  for lib in libtorch_cuda.so libtorch_cpu.so libc10_cuda.so; do
    [ -f "$d/torch/lib/$lib" ] && args+=(--binary "torch@$v=$d/torch/lib/$lib")
  done
done
# the +cpu build: the torch installed beside this Python (the dev venv's), when its version is TORCH_CPU
T=$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__), torch.__version__.split("+")[0])' 2>/dev/null || true)
if [ -n "$TORCH_CPU" ] && [ "${T#* }" = "$TORCH_CPU" ]; then
  d=$WORK/torch-cpu/include; mkdir -p "$d/torch/csrc" "$d/c10"
  cp -r "${T% *}/include/torch/csrc/distributed" "${T% *}/include/torch/csrc/cuda" "$d/torch/csrc/"
  cp -r "${T% *}/include/c10/util" "${T% *}/include/c10/cuda" "$d/c10/"
  args+=(--source "torch@$TORCH_CPU=$d" --binary "torch@$TORCH_CPU=${T% *}/lib/libtorch_cpu.so")
fi
mkdir -p "$WORK/cu12"; pip download -q --no-deps -d "$WORK/cu12" nvidia-cuda-runtime-cu12==12.9.79
(cd "$WORK/cu12" && unzip -q -o ./*.whl)
R=$WORK/cu12/nvidia/cuda_runtime
args+=(--cuda "12.9.79=$R/include:$R/lib/libcudart.so.12")
args+=(--cuda "13.0.96=$CUDA13_DIR/include:$(ls "$CUDA13_DIR"/lib*/libcudart.so.13 | head -1)")
"$PY" "$HERE/../msgindex_c.py" "${args[@]}" --out "${OUT:-$HERE/c-templates.jsonl.gz}"
