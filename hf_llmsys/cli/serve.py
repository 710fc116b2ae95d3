"""``llmsys serve MODEL``: an OpenAI-compatible HTTP server (``/v1/chat/completions``, streamed or not) for a model.

llmsys serve runs/sft                          # a folder of ours (or an adapter folder), transformers' server
llmsys serve runs/sft --port 8080 --host 0.0.0.0
llmsys serve model.gguf                        # a GGUF export, llama.cpp's server (pip install 'llama-cpp-python[server]')

curl http://localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \\
  -d '{"messages": [{"role": "user", "content": "Name three colours."}], "temperature": 0}'

A model folder is served by transformers' own server with the prompt format and stop tokens of ``llmsys chat``
(what ``llmsys sft`` saved, else the tokenizer's chat template; ``--template`` overrides), so a greedy reply
(``"temperature": 0``) equals ``llmsys chat MODEL --prompt ... --temperature 0``. A ``.gguf`` file is served by
llama.cpp's server with the chat template inside the file. The port is bound before the model loads: a port in use
is one line. Only the standard library is imported before the arguments are parsed, so ``--help`` is instant.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .parsing import CommandParser

# what serves MODEL -> (its name, the modules it imports, the install that brings them)
SERVERS = {
    "folder": ("transformers' server", ("fastapi", "uvicorn", "openai", "pydantic"), "pip install 'hf-llmsys[serve]'"),
    "gguf": (
        "llama.cpp's server",
        ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings"),
        "pip install 'llama-cpp-python[server]' (compiles llama.cpp, several minutes)",
    ),
}
GGUF_ONLY_DEFAULTS = {"template": "auto", "device": "auto", "dtype": "auto", "trust_remote_code": False}


def build_parser() -> CommandParser:
    parser = CommandParser(
        prog="llmsys serve",
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    parser.add_argument("model", metavar="MODEL", help="a model folder, an adapter folder, a Hub id, or a .gguf file")
    parser.add_argument("--host", default="localhost", help="address to listen on (default localhost; 0.0.0.0: every "
                        "interface)")  # fmt: skip
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    parser.add_argument("--template", default="auto", help="how to prompt (model folders): auto (what llmsys sft "
                        "saved, else the tokenizer's chat template), chat, alpaca, short, FILE.jinja or a template "
                        "file of llmsys sft")  # fmt: skip
    parser.add_argument("--device", default="auto", help="model folders: auto (the GPU when there is one), cpu, "
                        "cuda, cuda:N")  # fmt: skip
    parser.add_argument("--dtype", default="auto", help="model folders: auto (the saved dtype), float32, bfloat16, "
                        "float16")  # fmt: skip
    parser.add_argument("--trust_remote_code", "--trust-remote-code", action="store_true",
                        help="let transformers run the model folder's own code (models not built into it)")  # fmt: skip
    return parser


def is_gguf(model: str) -> bool:
    return model.lower().endswith(".gguf")


def check_flags(args) -> None:
    """ValueError naming the flag that does not apply or the MODEL that is not there, before anything is bound."""
    if is_gguf(args.model):
        path = Path(args.model).expanduser()
        if not path.is_file():
            raise ValueError(f"MODEL {args.model}: no such GGUF file")
        given = [name for name, default in GGUF_ONLY_DEFAULTS.items() if getattr(args, name) != default]
        if given:
            raise ValueError(f"--{given[0]} applies to model folders; a GGUF file carries its own chat template and "
                             "llama.cpp runs it on the CPU here")  # fmt: skip
    if args.dtype not in ("auto", "float32", "bfloat16", "float16"):
        raise ValueError(f"--dtype {args.dtype}: choose auto, float32, bfloat16 or float16")


def check_server_installed(model: str) -> None:
    """ValueError naming the install when the server for MODEL, or what it imports, is missing (looked up only)."""
    name, modules, install = SERVERS["gguf" if is_gguf(model) else "folder"]
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    if missing:
        raise ValueError(f"MODEL {model}: served by {name}, which needs {', '.join(missing)}: {install}")


def address(listening) -> str:
    """The OpenAI-compatible base URL of a bound socket."""
    host, port = listening.getsockname()[:2]
    return f"http://{host}:{port}/v1"


def main(argv: list[str] | None = None) -> None:
    """Run ``llmsys serve`` (see the module docstring) until Ctrl-C."""
    args = build_parser().parse_args(argv)
    check_flags(args)
    check_server_installed(args.model)
    from ..serving.listening import bind_listening_socket

    if is_gguf(args.model):
        from ..serving.llama_cpp_backend import serve_gguf

        with bind_listening_socket(args.host, args.port) as listening:
            print(f"llmsys serve: {args.model} with llama.cpp's server on {address(listening)} (prompts: the file's "
                  "chat template); Ctrl-C stops it", flush=True)  # fmt: skip
            serve_gguf(Path(args.model).expanduser(), listening)
        return
    with bind_listening_socket(args.host, args.port) as listening:  # before the model is read: a taken port is cheap
        from ..chat.loading import resolve_device
        from ..serving.transformers_backend import serve_with_transformers, served_model

        device = resolve_device(args.device)
        served = served_model(args.model, args.template, args.trust_remote_code)
        print(f"llmsys serve: {served.source} with transformers' server on {address(listening)} (prompts: "
              f"{served.prompts}); Ctrl-C stops it", flush=True)  # fmt: skip
        serve_with_transformers(served, listening, device, args.dtype)
