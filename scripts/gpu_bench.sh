#!/usr/bin/env bash
# Issue 21's benchmarks on a lent GPU in one call (at most 580 s plus the wheel install; each part has its own limit):
#   1. benchmarks.llama_vs_hf eager: training fp32 and bf16 (tokens/s, MFU against the matmul peak measured on the GPU),
#      greedy decode batch 1 and 8 (batch 1 against the weight-read floor), peak training memory at SmolLM2's shape;
#   2. benchmarks.t5_vs_hf: training fp32 and bf16, beam 4;
#   3. the sparse GPU paths' parity (scripts/gpu_check.py --quick).
# Usage from the repository root:  bash scripts/gpu_bench.sh        (logs and JSON under $OUT, else /tmp/gpu_bench)
#   SMOKE=1 bash scripts/gpu_bench.sh   runs the same commands on tiny sizes on the CPU (checks the script itself).
#   PARTS="t5_fp32 llama_eager" bash scripts/gpu_bench.sh   runs only the parts named, in that order.
# Wheels in .whl/ (transformers and its dependencies, when the machine's own are too old) are installed first.
# On an H200 (2026-12-04) the parts took 60-85, 22, 28 and > 50 s (the wheel install about 15 s, a fresh machine's start about 30 s more).
set -uo pipefail
cd "$(dirname "$0")/.."
ALL_PARTS="llama_eager t5_fp32 t5_bf16 sparse_parity"
for name in ${PARTS:-}; do  # checked before anything is installed or run
    case " $ALL_PARTS " in
    *" $name "*) ;;
    *)
        echo "PARTS: unknown part '$name'; the parts: $ALL_PARTS" >&2
        exit 2
        ;;
    esac
done
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
OUT=${OUT:-/tmp/gpu_bench}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # hf_llmsys and benchmarks from this checkout
DEVICE=cuda
LLAMA=(--steps 10 --warmup 3 --repeats 3)
T5=(--steps 10 --warmup 3 --repeats 3)
SPARSE=(--quick)
if [ "${SMOKE:-0}" = 1 ]; then
    DEVICE=cpu
    LLAMA=(--tiny --quick --threads 2)
    T5=(--tiny --steps 2 --repeats 1 --new-tokens 4 --threads 2)
    SPARSE=(--quick --device cpu)
else
    if compgen -G ".whl/*.whl" >/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
fi
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"

part() {  # part NAME SECONDS ARGS... (of python): one benchmark under its own limit, its log in $OUT/NAME.log
    local name=$1 limit=$2
    shift 2
    echo "=== $name (limit ${limit} s) $(date -u +%T)"
    timeout "$limit" "$PY" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "=== $name rc $rc $(date -u +%T)"
    # the report at the end of each log (the table); the per-step lines stay in the log
    grep -v -E '^  (train|decode|memory|load|beam) ' "$OUT/$name.log" | tail -n 45
}

run_part() {  # run_part NAME: the part of that name, with its limit and arguments
    case $1 in
    llama_eager) part llama_eager 110 -m benchmarks.llama_vs_hf --device "$DEVICE" --skip-load "${LLAMA[@]}" \
        --json "$OUT/llama_eager.json" ;;
    t5_fp32) part t5_fp32 40 -m benchmarks.t5_vs_hf --device "$DEVICE" --load-repeats 0 "${T5[@]}" \
        --json "$OUT/t5_fp32.json" ;;
    t5_bf16) part t5_bf16 40 -m benchmarks.t5_vs_hf --device "$DEVICE" --precision bf16 --load-repeats 0 "${T5[@]}" \
        --json "$OUT/t5_bf16.json" ;;
    sparse_parity) part sparse_parity 40 scripts/gpu_check.py "${SPARSE[@]}" ;;
    esac
}

for name in ${PARTS:-$ALL_PARTS}; do
    run_part "$name"
done
