#!/usr/bin/env bash
# The GPU checks in one run (`make gpu-check`): bench/gpu_check.py runs every part under its
# own time limit and prints one table (see "GPU checks" in bench/README.md). This wrapper only
# finds the packages a bare torch + transformers image lacks: where pydantic, tensordict or
# pebble are missing, they are unpacked from the wheels in .whl/ (`make gpu-wheels`), no pip,
# no package index. Arguments go to the driver, and so does $ARGS (`make gpu-check
# ARGS=--dry-run`); logs and JSON go to $OUT, or bench/results/gpu
# (gpu-dry for the dry run).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SITE=${ASCENT_GPU_SITE:-/tmp/ascent-gpu-site}

if ! $PY -c "import pydantic, tensordict, pebble" 2>/dev/null; then
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

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
# shellcheck disable=SC2086  # $ARGS is a list of arguments
exec $PY bench/gpu_check.py ${OUT:+--out "$OUT"} ${ARGS:-} "$@"
