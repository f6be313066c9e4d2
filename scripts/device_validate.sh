#!/usr/bin/env bash
# GPU validation run (issue 8): doctor's NVML figures vs nvidia-smi, the CUDA/NCCL reference
# warmup, vLLM's Triton DCP index helper vs the reference, and real CUDA hangs collected.
#
# Two halves, because the GPU machine reaches no package registry:
#
#   bash scripts/device_validate.sh --prepare [VLLM_VERSION] [FLASHINFER_VERSION]
#       on a machine with PyPI (here), from the repo root. Builds .devcarry/ (gitignored: carry it
#       with the work tree to the GPU machine; 62 MiB for 0.33.0 on Python 3.11, printed):
#         vllm-X-py.tar.xz       the release wheel's Python tree WITH its vllm-X.dist-info/
#                                (without the dist-info vLLM cannot read its own version and
#                                disables Triton: "module 'triton' has no attribute
#                                'next_power_of_2'")
#         wheels/                the pure-Python/CPU packages of vLLM's import chain
#                                (tests/requirements.txt minus torch, plus xgrammar --no-deps);
#                                without them the Triton cross-check cannot import vLLM
#                                ("No module named 'pydantic'") and skips
#         flashinfer_python-*.whl  only with FLASHINFER_VERSION given: doctor's FlashInfer checks
#                                with FlashInfer present
#       Download for the GPU machine's Python: PREP_PY_VERSION=3.12 (default: this interpreter's).
#
#   bash scripts/device_validate.sh OUTDIR
#       on the GPU machine, from the repo root: the steps below (STEPS="..." picks some), the
#       results packed into OUTDIR/validate.tar.gz. The import-chain wheels are installed with
#       --no-index into /tmp/vdeps (the GPU machine's own torch/triton are kept).
set -u
if [ "${1:-}" = "--prepare" ]; then
  VV=${2:-0.33.0}; FV=${3:-${FLASHINFER_VERSION:-none}}
  PY=${PYTHON:-python3}
  PV=${PREP_PY_VERSION:-$($PY -c 'import sys;print(f"{sys.version_info[0]}.{sys.version_info[1]}")')}
  set -e
  mkdir -p .devcarry/wheels
  tree=$($PY -c "import sys; from sm120kit.patchset.release import release_tree; print(release_tree('vllm', sys.argv[1]))" "$VV")
  tar -cJf ".devcarry/vllm-$VV-py.tar.xz" -C "$tree" vllm "vllm-$VV.dist-info"
  # packages the GPU machine's Python already has need not travel: numpy (its torch stack) and
  # sm120kit's own dependencies (sm120kit runs there). PREP_SKIP overrides the list; it keeps
  # .devcarry under the 64 MiB a device run carries. The FlashInfer wheel (15 MB, for doctor's
  # FlashInfer checks) comes only when a version is given.
  skip=${PREP_SKIP:-numpy click rich pygments markdown-it-py mdurl psutil packaging}
  grep -v '^torch' tests/requirements.txt | grep -v -E "^($(echo "$skip" | tr ' ' '|'))([=<>!~ ]|$)" > .devcarry/requirements.txt
  plat=""
  for t in manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux_2_31 manylinux_2_34 manylinux_2_35; do
    plat="$plat --platform ${t}_x86_64"
  done
  # shellcheck disable=SC2086
  $PY -m pip download -q --only-binary=:all: --python-version "$PV" $plat --platform any \
    -d .devcarry/wheels -r .devcarry/requirements.txt
  # shellcheck disable=SC2086
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version "$PV" $plat --platform any \
    -d .devcarry/wheels xgrammar==0.2.8
  for p in $skip; do  # pulled in as dependencies of others: drop them again
    rm -f .devcarry/wheels/"$(echo "$p" | tr '-' '_')"-*.whl .devcarry/wheels/"$p"-*.whl
  done
  [ "$FV" = none ] || $PY -m pip download -q --no-deps -d .devcarry "flashinfer-python==$FV"
  mib=$(du -sm .devcarry | cut -f1)
  echo ".devcarry: ${mib} MiB (skipped: $skip)"
  [ "$mib" -le 64 ] || echo "warning: over the 64 MiB a device run carries; add packages the GPU machine has to PREP_SKIP" >&2
  exit 0
fi
set -u
OUT=${1:?usage: device_validate.sh OUTDIR}
mkdir -p "$OUT/v"
V=$OUT/v
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
STEPS=${STEPS:-facts doctor warmup triton hang-sleep hang-nccl warmup-stall gpu-tests}
want() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
step() { echo; echo "=== $* [$(date +%T)]"; }
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "rc=$rc wall=$(( ($(date +%s%N) - s) / 1000000 ))ms" >&2; return $rc; }

if want facts; then
step facts
nvidia-smi > "$V/nvidia-smi.txt" 2>&1
nvidia-smi -q > "$V/nvidia-smi-q.txt" 2>&1
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,memory.used,driver_version,compute_cap,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,persistence_mode,ecc.mode.current,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw,temperature.gpu,utilization.gpu --format=csv > "$V/nvsmi.csv" 2>&1
cat "$V/nvsmi.csv"
nvidia-smi topo -m > "$V/topo.txt" 2>&1
$PY -c 'import torch,sys;print("torch",torch.__version__,"cuda",torch.version.cuda,"gpus",torch.cuda.device_count(),torch.cuda.get_device_capability(0))'

fi
if want doctor; then
step doctor
t $PY -m sm120kit doctor --json > "$V/doctor.json"; echo "doctor rc=$?"
t $PY -m sm120kit doctor --deep --layout --json > "$V/doctor-deep.json"; echo "doctor deep rc=$?"
$PY -m sm120kit doctor > "$V/doctor.txt" 2>&1
$PY -m sm120kit.facts.nvml --record "$V/nvml-record.json" > "$V/nvml-snapshot.json" 2> "$V/nvml-err.txt"
if ls .devcarry/flashinfer_python-*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/fi .devcarry/flashinfer_python-*.whl
  PYTHONPATH=/tmp/fi:${PYTHONPATH:-} t $PY -m sm120kit doctor --json > "$V/doctor-flashinfer.json"
fi
$PY scripts/bench_doctor.py --runs 5 > "$V/bench-doctor.txt" 2>&1; tail -8 "$V/bench-doctor.txt"
$PY scripts/compare_nvml.py "$V/nvml-snapshot.json" "$V/nvidia-smi-q.txt" "$V/nvsmi.csv" > "$V/nvml-compare.txt" 2>&1; cat "$V/nvml-compare.txt"

fi
if want warmup; then
step warmup
t $PY -m sm120kit warmup run --device cuda --dcp 1 --json > "$V/warmup-cuda-dcp1.json"; tail -c 600 "$V/warmup-cuda-dcp1.json"
for n in 2 4 8; do
  t $PY -m sm120kit warmup run --device cuda --dist-backend gloo --dcp $n --merge both --json > "$V/warmup-cuda-gloo-dcp$n.json"
  tail -c 400 "$V/warmup-cuda-gloo-dcp$n.json"
done
t $PY -m sm120kit warmup run --device cpu --dcp 8 --json > "$V/warmup-cpu-dcp8.json"

fi
if want triton; then
step triton-crosscheck
ls .devcarry/vllm-*-py.tar.xz >/dev/null 2>&1 || echo "no .devcarry/vllm-*-py.tar.xz: run --prepare first" >&2
if [ -f .devcarry/requirements.txt ]; then
  # vLLM's import chain, offline, beside (not into) the machine's own environment
  $PY -m pip install -q --no-index --find-links .devcarry/wheels --no-deps --target /tmp/vdeps .devcarry/wheels/*.whl \
    || echo "installing the import-chain wheels failed (Python version differs? PREP_PY_VERSION)" >&2
fi
for tb in .devcarry/vllm-*-py.tar.xz; do
  [ -f "$tb" ] || continue
  d=/tmp/vtree-$(basename "$tb" -py.tar.xz); mkdir -p "$d"; tar -xJf "$tb" -C "$d"
  ls -d "$d"/vllm-*.dist-info >/dev/null 2>&1 || echo "warning: $tb has no vllm-*.dist-info (vLLM disables Triton without it)" >&2
  SM120KIT_VLLM_TREE=$d PYTHONPATH=/tmp/vdeps:${PYTHONPATH:-} t $PY -m pytest -q -rs tests/gpu -p no:cacheprovider 2>&1 | tail -5
  PYTHONPATH=$PWD:$d:/tmp/vdeps:${PYTHONPATH:-} t $PY tests/gpu/crosscheck_dcp_index.py "$d" --cases 48 > "$V/crosscheck-$(basename "$d").json" 2> "$V/crosscheck-err.txt"
  tail -c 800 "$V/crosscheck-$(basename "$d").json"; tail -5 "$V/crosscheck-err.txt"
done

fi
if want hang-sleep; then
step hang-sleep
$PY scripts/gpu_hang_demo.py sleep --seconds 60 > "$V/hang-sleep.out" 2>&1 &
HP=$!
for i in $(seq 1 60); do grep -q ready "$V/hang-sleep.out" && break; sleep 0.5; done
sleep 2
t $PY -m sm120kit collect --attach $HP -o "$V/attach-sleep" --json > "$V/attach-sleep.json" 2> "$V/attach-sleep.err"
kill $HP 2>/dev/null; wait $HP 2>/dev/null
tail -c 1500 "$V/attach-sleep.json"

fi
if want hang-nccl; then
step hang-nccl
export TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DEBUG_INFO_TEMP_FILE=$V/fr/nccl_trace_rank_
mkdir -p "$V/fr"
t $PY -m sm120kit collect --stall-timeout 30 --deadline 60 -o "$V/collect-nccl" --json -- $PY scripts/gpu_hang_demo.py nccl-delay --seconds 40 --timeout 10 > "$V/collect-nccl.json" 2> "$V/collect-nccl.err"
tail -c 1500 "$V/collect-nccl.json"; tail -20 "$V/collect-nccl.err"
ls -la "$V/fr" "$V"/collect-nccl/* 2>/dev/null | head -30
unset TORCH_NCCL_DUMP_ON_TIMEOUT TORCH_NCCL_TRACE_BUFFER_SIZE TORCH_NCCL_DEBUG_INFO_TEMP_FILE

fi
if want gpu-tests; then
step gpu-tests
t $PY -m pytest -q -rs -m "gpu or sm120" -p no:cacheprovider tests 2>&1 | tail -15

fi
if want warmup-stall; then
step warmup-stall
t $PY -m sm120kit warmup run --device cuda --dist-backend gloo --dcp 4 --inject-stall 2:merge --stall-timeout 10 --bundle-dir "$V/warmup-stall" --json > "$V/warmup-stall.json"
tail -c 1200 "$V/warmup-stall.json"
for b in "$V"/warmup-stall/*.tar.gz "$V"/collect-nccl/*.tar.gz; do
  [ -f "$b" ] || continue
  t $PY -m sm120kit diagnose "$b" --json > "$V/diagnose-$(basename "$(dirname "$b")").json"
  $PY -m sm120kit diagnose "$b" 2>&1 | head -30
done
fi

step pack
tar -czf "$OUT/validate.tar.gz" -C "$OUT" v && rm -rf "$V"
ls -la "$OUT"
