#!/usr/bin/env bash
# Creates (or reuses) .venv and installs hf-llmsys with its development extras.
# torch: pinned to LLMSYS_TORCH_SPEC (default torch==2.13.0, the CPU build these machines carry on local disk)
# only when the environment has no torch yet; set LLMSYS_TORCH_SPEC="" to let pip choose.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  spec=${LLMSYS_TORCH_SPEC-torch==2.13.0}
  [ -n "$spec" ] && .venv/bin/python -m pip install -q "$spec"
fi
.venv/bin/python -m pip install -q -e ".[dev]"
