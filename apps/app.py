"""Hugging Face Space entry for the hf-llmsys demo: all logic lives in ``hf_llmsys.demo``.

Locally: ``python apps/app.py`` (binds 127.0.0.1). On a Space, the runtime sets GRADIO_SERVER_NAME=0.0.0.0 and the
page trains its small positional-encoding zoo in the background on first start (<= 3 minutes on 2 CPU cores).
"""

import os

from hf_llmsys.demo.cli import main

if __name__ == "__main__":
    main(["--host", os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
          "--port", os.environ.get("GRADIO_SERVER_PORT", "7860"), *os.environ.get("LLMSYS_DEMO_ARGS", "").split()])  # fmt: skip
