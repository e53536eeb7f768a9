#!/usr/bin/env bash
# The prepared GPU check (issue 6): run on the device machine from the repository root, e.g.
#   run(command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=540)
# It needs no network. The machine has cupy-cuda13x, numpy, pytest, pytest-benchmark, hypothesis
# and torch; carry array-api-compat, array-api-strict and autograd as wheels in .whl/, made here:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp -d .whl array-api-compat array-api-strict autograd
# Writes 8 files under $OUT (the most that come back); budget: under 8 minutes on an H200.
set -u -o pipefail
OUT=${OUT:-/tmp/dualtape-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site . || exit 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import cupy, numpy, torch; print('cupy', cupy.__version__, 'CUDA runtime', \
cupy.cuda.runtime.runtimeGetVersion(), 'numpy', numpy.__version__, 'torch', torch.__version__)"
  dualtape info
} > "$OUT/gpu-info.txt" 2>&1

# 1. Correctness: every gpu-marked test, on the fused and on the generic path.
timeout 150 python3 -m pytest -q -m gpu tests -p no:cacheprovider > "$OUT/gpu-tests.log" 2>&1
echo "gpu tests exit $?" >> "$OUT/gpu-info.txt"
DUALTAPE_FUSED=0 timeout 100 python3 -m pytest -q -m gpu tests -p no:cacheprovider \
  > "$OUT/gpu-tests-generic.log" 2>&1
echo "gpu tests (generic path) exit $?" >> "$OUT/gpu-info.txt"

# 2. Kernel launches per time step.
timeout 60 python3 bench/gpu_launches.py > "$OUT/launches.json" 2>&1

# 3. The cross-device benchmark, T = 50 at batch 1 and 256: numpy, cupy generic (fused0) and
#    fused (fused1), torch on the GPU and the references (torch autograd, torch.nn.LSTM = cuDNN).
for mode in 0 1; do
  DUALTAPE_FUSED=$mode timeout 120 python3 bench/compare_devices.py \
    --backends numpy,cupy,torch:cuda --dtypes float32,float64 \
    --workloads train/fifty-time-steps,train/fifty-time-steps-batch-256 \
    --markdown "$OUT/bench-fused$mode.md" > /dev/null 2>&1
  echo "compare_devices (DUALTAPE_FUSED=$mode) exit $?" >> "$OUT/gpu-info.txt"
done
DUALTAPE_FUSED=1 timeout 60 dualtape bench --backends numpy,cupy --quick --references none \
  --json "$OUT/bench-cli.json" > /dev/null 2>&1
echo "dualtape bench exit $?" >> "$OUT/gpu-info.txt"

# 4. The pytest-benchmark suite on cupy.
timeout 90 python3 -m pytest -q bench -k cupy --benchmark-enable -p no:cacheprovider \
  --benchmark-json "$OUT/bench-suite-cupy.json" > /dev/null 2>&1
echo "bench suite exit $?" >> "$OUT/gpu-info.txt"
