"""``llmsys demo``: the Gradio page on 127.0.0.1 (analytics and share links off), nothing to download.

llmsys demo                          # full zoo (runs/pe_zoo) if present, else the cached demo zoo, else train it
llmsys demo --zoo runs/pe_zoo        # a zoo folder, or a Hub repo id (owner/name)
llmsys demo --no_train               # no background training (tabs 1, 3 and 5 need no model)
llmsys demo --quick                  # the quick demo zoo even when a full zoo exists
llmsys demo --model runs/base --model runs/base-sft   # your own causal LMs beside the zoo (perplexity, generation)
llmsys demo --host 0.0.0.0 --port 7860
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..demo.limits import Limits
from .parsing import CommandParser

# zoo (torch) and app (gradio) are imported after parsing, so `llmsys demo --help` stays instant

DEFAULT_PORT = 7860
ZOO_HELP = (  # zoo.FULL_ZOO_DIR and zoo.default_cache_dir (tests/test_cli_help.py checks them)
    "zoo folder or Hub repo id (default: runs/pe_zoo when it exists, else the quick demo zoo in --cache_dir, "
    "trained in the background when missing unless --no_train)"
)


@dataclass
class DemoOptions:
    zoo: str | None
    host: str
    port: int
    train: bool
    quick: bool
    cache_dir: Path
    real_model: bool
    t5: list[Path]
    sparse_bench: Path | None
    limits: Limits
    models: list[str] = field(default_factory=list)


def build_parser() -> CommandParser:
    """The flags of `llmsys demo`."""
    defaults = Limits()
    parser = CommandParser(prog="llmsys demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--zoo", default=None, help=ZOO_HELP)
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=None, help=f"port (default {DEFAULT_PORT} or $GRADIO_SERVER_PORT)")
    parser.add_argument("--no_train", action="store_true", help="never train the demo zoo in the background")
    parser.add_argument("--quick", action="store_true", help="use (or train) the quick demo zoo, not runs/pe_zoo")
    parser.add_argument("--cache_dir", type=Path, default=None, help="demo zoo cache (default $LLMSYS_DEMO_ZOO_DIR "
                        "or ~/.cache/hf_llmsys/pe_zoo_demo)")  # fmt: skip
    parser.add_argument("--no_real_model", action="store_true", help="do not load the fetched SmolLM2 checkpoint")
    parser.add_argument("--t5", type=Path, nargs="*", default=[], help="llmsys_t5 model folders for the generation "
                        "tab (GNMT length penalty), e.g. runs/llmsys-t5-tiny")  # fmt: skip
    parser.add_argument("--model", action="append", default=[], metavar="DIR_OR_REPO",
                        help="a saved causal LM (folder or Hub repo id; ours or transformers'), added to the "
                        "perplexity and generation tabs beside the zoo; repeatable")  # fmt: skip
    parser.add_argument(
        "--sparse_bench",
        type=Path,
        default=None,
        help="JSON written by python -m benchmarks.sparse_attention --json, shown in the sparse tab",
    )
    for name, help_text in (
        ("max_chars", "characters of pasted text"),
        ("max_tokens", "tokens of pasted text"),
        ("max_new_tokens", "generated tokens"),
        ("max_beams", "beams"),
        ("concurrency_limit", "requests run at once"),
        ("max_queue_size", "requests waiting"),
    ):
        parser.add_argument(f"--{name}", type=int, default=getattr(defaults, name),
                            help=f"limit: {help_text} (default {getattr(defaults, name)})")  # fmt: skip
    return parser


def parse_args(argv: list[str] | None) -> DemoOptions:
    """Command-line options -> DemoOptions (ValueError for contradictory ones)."""
    args = build_parser().parse_args(argv)
    if args.zoo and args.quick:
        raise ValueError("--zoo and --quick both choose the zoo; give one of them.")
    for name in ("max_chars", "max_tokens", "max_new_tokens", "max_beams", "concurrency_limit", "max_queue_size"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be >= 1, got {getattr(args, name)}.")
    port = args.port if args.port is not None else int(os.environ.get("GRADIO_SERVER_PORT", DEFAULT_PORT))
    if not 0 < port < 65536:
        raise ValueError(f"--port must be in 1 .. 65535, got {port}.")
    missing = [str(p) for p in args.t5 if not (p / "config.json").is_file()]
    if missing:
        raise ValueError(f"--t5: no config.json in {missing}; train one with `llmsys train --model_type llmsys_t5`.")
    limits = Limits(**{name: getattr(args, name) for name in ("max_chars", "max_tokens", "max_new_tokens",
                                                             "max_beams", "concurrency_limit", "max_queue_size")})  # fmt: skip
    if len(set(args.model)) != len(args.model):
        raise ValueError(f"--model: {args.model} names a model twice; give each once.")
    from ..demo.zoo import default_cache_dir

    return DemoOptions(args.zoo, args.host, port, not args.no_train, args.quick, args.cache_dir or default_cache_dir(),
                       not args.no_real_model, args.t5, args.sparse_bench, limits, args.model)  # fmt: skip


def load_user_model(source: str):
    """A causal LM the user named with --model (folder or Hub id, any AutoModelForCausalLM), named after it."""
    from ..data.pretrained_sources import load_causal_lm, load_tokenizer
    from ..demo.zoo import RealModel

    model = load_causal_lm(source, "--model").eval()
    tokenizer = load_tokenizer(source, "--model")
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is None:
        raise ValueError(f"--model {source}: its tokenizer has neither a pad nor an eos token; set one and save it.")
    path = Path(source).expanduser()
    name = path.resolve().name if path.exists() else source
    return RealModel(name, model, tokenizer)


def load_t5(folder: Path):
    """An llmsys_t5 folder as a generation-tab entry (seq2seq, GNMT-capable)."""
    from ..data.pretrained_sources import load_model, load_tokenizer
    from ..demo.generation_tab import GenerationModel

    model = load_model(folder, "--t5").eval()
    return GenerationModel(f"t5: {folder.name}", model, load_tokenizer(folder, "--t5"), seq2seq=True)


def build_context(options: DemoOptions):
    """The DemoContext the options describe; the zoo is loaded or its training started."""
    from ..demo.app import DemoContext
    from ..demo.zoo import FULL_ZOO_DIR, ZooManager, load_real_model

    manager = ZooManager(source=options.zoo, cache_dir=options.cache_dir, train=options.train)
    if options.quick:
        manager.skip_folders = (FULL_ZOO_DIR,)
    manager.start()
    return DemoContext(zoo=manager, limits=options.limits,
                       real_model=load_real_model() if options.real_model else None,
                       seq2seq=[load_t5(folder) for folder in options.t5], sparse_bench=options.sparse_bench,
                       user_models=[load_user_model(source) for source in options.models])  # fmt: skip


def launch(demo, host: str, port: int, prevent_thread_lock: bool = False):
    """Start the server: no share link, no analytics; local requests bypass any HTTP proxy."""
    no_proxy = {"localhost", "127.0.0.1", "::1"} | set(filter(None, os.environ.get("NO_PROXY", "").split(",")))
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = ",".join(sorted(no_proxy))
    return demo.launch(server_name=host, server_port=port, share=False, prevent_thread_lock=prevent_thread_lock,
                       show_error=True, footer_links=["api"], quiet=prevent_thread_lock)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``llmsys demo``."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    options = parse_args(argv)
    from ..demo.app import build_app

    demo = build_app(build_context(options))
    print(f"llmsys demo: http://{options.host}:{options.port} (Ctrl+C to stop)", flush=True)
    launch(demo, options.host, options.port)
