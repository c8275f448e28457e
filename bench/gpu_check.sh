#!/usr/bin/env bash
# The GPU checks in one run (`make gpu-check`): every `gpu` test, then the CUDA halves of the
# benches, each under its own time limit so that one slow part cannot take the others' time.
# Needs no Ray and no package index: where pydantic or tensordict are missing, they are
# unpacked from the wheels in .whl/ (see "GPU checks" in bench/README.md). Results (pytest's
# log and each bench's JSON) go to $OUT, or bench/results/gpu.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-bench/results/gpu}
SITE=${ASCENT_GPU_SITE:-/tmp/ascent-gpu-site}
mkdir -p "$OUT"

if ! $PY -c "import pydantic, tensordict" 2>/dev/null; then
  # Unpack, not pip: a wheel is a zip, and this needs only the ones that fit this Python.
  $PY - "$SITE" <<'PYEOF'
import glob, sys, zipfile
tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
for wheel in sorted(glob.glob(".whl/*.whl")):
    if "-py3-none-any" in wheel or f"-{tag}-" in wheel:
        zipfile.ZipFile(wheel).extractall(sys.argv[1])
        print("unpacked", wheel.split("/")[-1])
PYEOF
fi
export PYTHONPATH="src:.:$SITE${PYTHONPATH:+:$PYTHONPATH}"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"

status=0
run() {  # run LIMIT_SECONDS NAME COMMAND...: one part, its output kept in $OUT/NAME.log
  local limit=$1 name=$2; shift 2
  echo "== $name"
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log" | tail -n 40
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc"
  [ "$rc" = 0 ] || status=1
}

gpu_tests=$(grep -rl "pytest.mark.gpu" tests --include="*.py" | sort)
run 150 tests $PY -m pytest -m gpu -q -p no:cacheprovider --durations=8 $gpu_tests
run 45 logprob_memory $PY bench/logprob_memory.py --device cuda --json "$OUT/logprob_memory.json"
run 75 train_step $PY bench/train_step.py --device cuda --json "$OUT/train_step.json"
# transformers' generate at low concurrency takes minutes on a 0.6B model: 64 and 256 only.
run 160 rollout $PY bench/rollout.py --device cuda --concurrency 64 256 --repeats 1 \
  --max-new-tokens 128 --json "$OUT/rollout.json"
exit $status
