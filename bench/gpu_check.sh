#!/usr/bin/env bash
# The prepared GPU check: run on the device machine from the repository root, e.g.
#   run(command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=540)
# It needs no network. The machine has cupy-cuda13x, numpy, pytest, pytest-benchmark, hypothesis
# and torch; carry array-api-compat, array-api-strict and autograd as wheels in .whl/, made here:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp -d .whl array-api-compat array-api-strict autograd
# Every step logs under $OUT (steps.log says what ran, how long and its exit status), and a
# failed step does not stop the rest. The step timeouts add up to 455 s. Without a GPU (a dry
# run here) the GPU steps report that they need CUDA and the script still ends normally.
set -u -o pipefail
OUT=${OUT:-/tmp/dualtape-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
SITE=$(mktemp -d /tmp/dualtape-site.XXXX)
export PYTHONPATH=$SITE:$PWD  # the wheels, and this checkout's dualtape without installing it
STEPS="$OUT/steps.log"
: > "$STEPS"

# step NAME TIMEOUT LOG COMMAND...: run COMMAND with a timeout, stdout and stderr into LOG.
step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local start=$SECONDS
  timeout "$limit" "$@" > "$log" 2>&1
  local status=$?
  echo "$name: exit $status in $((SECONDS - start)) s (limit $limit s, log $(basename "$log"))" \
    >> "$STEPS"
  return $status
}

step install-wheels 25 "$OUT/install.log" python3 -m pip install --no-index --no-deps \
  --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
dualtape() { python3 -c 'import sys; from dualtape.cli import main; sys.exit(main())' "$@"; }
export -f dualtape
# needs_cuda NAME LOG: true (and says so in LOG and steps.log) when no CUDA device works.
CUDA_PROBLEM=$(python3 -c 'import cupy; n = cupy.cuda.runtime.getDeviceCount(); assert n, "no CUDA device"' 2>&1 | tail -n 1)
needs_cuda() {
  [ -z "$CUDA_PROBLEM" ] && return 1
  echo "needs CUDA: $CUDA_PROBLEM" | tee "$2" | sed "s/^/$1: skipped, /" >> "$STEPS"
}
step info 15 "$OUT/info.txt" bash -c 'date -u; nvidia-smi --query-gpu=name,driver_version,\
memory.total --format=csv || echo "no nvidia-smi"; python3 -c "import numpy; print(\"numpy\", \
numpy.__version__)"; python3 -c "import cupy; print(\"cupy\", cupy.__version__, \"CUDA runtime\", \
cupy.cuda.runtime.runtimeGetVersion(), \"driver\", cupy.cuda.runtime.driverGetVersion())"; \
python3 -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda)"; \
dualtape info'

# 1. Correctness: every gpu-marked test, on the fused path (the default) and the generic path;
#    in one process (addopts without pytest-xdist's -n: the machine lacks it, and has one GPU);
#    the fused tests include o = 512 at batch 64, and the standard cells' kernels
#    (standard_lstm_gru.cu) against torch's committed numbers (test_cells_torch.py).
DUALTAPE_FUSED=1 step gpu-tests-fused 100 "$OUT/gpu-tests-fused.log" \
  python3 -m pytest -q -rs -o addopts=--benchmark-disable -m gpu tests -p no:cacheprovider
DUALTAPE_FUSED=0 step gpu-tests-generic 60 "$OUT/gpu-tests-generic.log" \
  python3 -m pytest -q -rs -o addopts=--benchmark-disable -m gpu tests -p no:cacheprovider

# 2. Kernel launches per time step (JSON on stdout, everything else in the log).
step launches 35 "$OUT/launches.log" bash -c "python3 bench/gpu_launches.py > '$OUT/launches.json'"

# 3. T = 50 training at batch 1 and 256: numpy, CuPy generic (FUSED=0) and fused (FUSED=1),
#    torch on the GPU and the reference rows (torch autograd; torch.nn.LSTM = cuDNN).
#    The generic run times CuPy alone; the fused run has every row.
WORKLOADS=train/fifty-time-steps,train/fifty-time-steps-batch-256
needs_cuda bench-fused1 "$OUT/bench-fused1.log" || DUALTAPE_FUSED=1 step bench-fused1 120 \
  "$OUT/bench-fused1.log" python3 bench/compare_devices.py --quick --workloads "$WORKLOADS" \
  --backends numpy,cupy,torch:cuda --dtypes float32,float64 \
  --markdown "$OUT/bench-fused1.md" --json "$OUT/bench-fused1.json"
needs_cuda bench-fused0 "$OUT/bench-fused0.log" || DUALTAPE_FUSED=0 step bench-fused0 40 \
  "$OUT/bench-fused0.log" python3 bench/compare_devices.py --quick --workloads "$WORKLOADS" \
  --backends cupy --references none --dtypes float32,float64 \
  --markdown "$OUT/bench-fused0.md" --json "$OUT/bench-fused0.json"
needs_cuda bench-cli "$OUT/bench-cli.log" || step bench-cli 30 "$OUT/bench-cli.log" \
  dualtape bench --backends numpy,cupy --quick --references none --workloads lstm,update,train \
  --json "$OUT/bench-cli.json"
# 4. StandardLSTM and GRU (standard_lstm_gru.cu) against torch.nn.LSTM / nn.GRU (cuDNN) on the
#    GPU.
needs_cuda bench-cells "$OUT/bench-cells.log" || step bench-cells 30 "$OUT/bench-cells.log" \
  dualtape bench --backends numpy,cupy --quick --workloads cells \
  --references torch.nn,torch.nn:cuda --markdown "$OUT/bench-cells.md" --json "$OUT/bench-cells.json"
echo "done in $SECONDS s" >> "$STEPS"
