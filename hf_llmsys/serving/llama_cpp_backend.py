"""llama.cpp's OpenAI-compatible server, as llama-cpp-python ships it (``python -m llama_cpp.server``), for a GGUF file.

``llmsys serve model.gguf`` is ``python -m llama_cpp.server --model model.gguf --n_ctx 0`` on the socket
``listening.py`` bound: the same app (``llama_cpp.server.app.create_app``) under uvicorn. ``n_ctx=0`` takes the
context length the file declares (llama-cpp-python's default, 2048, would run past a smaller model's positions).
Prompts: the chat template the file carries (``tokenizer.chat_template``, which ``llmsys export --format gguf``
writes), rendered by llama-cpp-python's Jinja2 chat formatter; generation stops at the file's end-of-generation
tokens (EOS, and ``eot_token_id`` when the model's generation config listed an end-of-turn token).

Needs ``pip install 'llama-cpp-python[server]'`` (compiles llama.cpp); without it, one line naming the install
(``hf_llmsys/cli/serve.py``, ``SERVERS``).
"""

from __future__ import annotations

import socket
from pathlib import Path


def serve_gguf(model: Path, listening: socket.socket) -> None:
    """Serve the GGUF file ``model`` on ``listening`` until the server stops (Ctrl-C)."""
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    host, port = listening.getsockname()[:2]
    settings = ModelSettings(model=str(model), n_ctx=0, verbose=False)
    app = create_app(server_settings=ServerSettings(host=host, port=port), model_settings=[settings])
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info")).run(sockets=[listening])
