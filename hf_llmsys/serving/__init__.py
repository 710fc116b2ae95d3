"""``llmsys serve MODEL``: a model behind an OpenAI-compatible HTTP API, through servers that exist.

- A model folder (ours, an adapter folder of ``llmsys sft --lora``, any transformers causal LM) or a Hub id:
  transformers' own server (``transformers serve``, ``transformers/cli/serving``), which cannot load a plugin's
  model type by itself: its model loader imports the class named in ``config.json``'s ``architectures`` from the
  ``transformers`` module (``getattr(transformers, "LlmsysLlamaForCausalLM")`` fails, with or without
  ``--trust-remote-code``). ``transformers_backend.py`` gives it a loader that loads through ours and serves with
  the prompt format and stop tokens ``llmsys chat`` uses, so that a greedy reply equals ``llmsys chat --prompt``.
- A ``.gguf`` file (``llmsys export --format gguf``): llama.cpp's server as llama-cpp-python ships it
  (``llama_cpp.server``), with the chat template the file carries (``llama_cpp_backend.py``).

Both listen on ``--host`` / ``--port``, bound before anything is loaded (``listening.py``): a port in use is one line.
Endpoints: ``POST /v1/chat/completions`` (``"stream": true`` for server-sent events), ``POST /v1/completions``,
``GET /v1/models``; transformers' server also ``GET /health``.
"""
