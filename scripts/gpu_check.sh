#!/usr/bin/env bash
# GPU check of the sparse GPT-3-style model (issue 5): parity, then timings; about 3-4 minutes on an H200.
# Usage on a lent GPU machine, from the repository root:  bash scripts/gpu_check.sh
# Uses .venv when present (bash scripts/setup.sh with LLMSYS_TORCH_SPEC="torch" for a CUDA build), else python.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=python
[ -x .venv/bin/python ] && PY=.venv/bin/python
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device visible to torch')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # hf_llmsys and benchmarks from this checkout
exec timeout 290 "$PY" scripts/gpu_check.py "$@"
