"""``llmsys chat MODEL``: talk to a causal LM in the terminal, the reply streamed as it is generated.

llmsys chat runs/sft                          # a folder of llmsys train / sft, or an adapter (llmsys sft --lora_r N)
llmsys chat ~/models/SmolLM2-135M-Instruct    # any transformers causal LM folder (or a Hub id)
llmsys chat runs/sft --temperature 0.7 --top_p 0.9 --seed 0
llmsys chat runs/sft --prompt "Name three colours."   # one reply on stdout, for scripts (--prompt - reads stdin)

Prompts follow what ``llmsys sft`` saved beside the model (``prompt_template.json``: e.g. Stanford Alpaca's template),
else the tokenizer's chat template; ``--template`` overrides (`prompt_formats.py`). Interactive commands: ``/reset``,
``/system TEXT``, ``/help``, ``/quit`` (or Ctrl-D); Ctrl-C stops a reply. Replies go to stdout, everything else to
stderr.
"""

from __future__ import annotations

import argparse
import math
import sys

from .parsing import CommandParser

SEED_LIMIT = 2**32  # numpy's seed range (transformers.set_seed seeds python, numpy and torch)


def build_parser() -> argparse.ArgumentParser:
    """The flags of ``llmsys chat`` (values checked by `check_flags`)."""
    parser = CommandParser(
        prog="llmsys chat",
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    parser.add_argument("model", metavar="MODEL", help="a saved causal LM folder, a Hub id, or a LoRA adapter folder")
    parser.add_argument("--prompt", default=None, help="answer this one message, print the reply on stdout and exit "
                        "('-': read the message from stdin)")  # fmt: skip
    parser.add_argument("--system", default=None, help="system prompt (chat templates only; /system TEXT changes it)")
    parser.add_argument("--template", default="auto", help="how to prompt: auto (what llmsys sft saved, else the "
                        "tokenizer's chat template), chat, alpaca, short, FILE.jinja (a chat template) or a "
                        "template file of llmsys sft")  # fmt: skip
    parser.add_argument("--max_new_tokens", type=int, default=512,
                        help="longest reply in tokens (default 512; cut to the model's context)")  # fmt: skip
    parser.add_argument("--temperature", type=float, default=None, help="0: greedy; > 0: sample at this temperature "
                        "(default: the model's generation_config, greedy unless it samples)")  # fmt: skip
    parser.add_argument("--top_p", type=float, default=None,
                        help="nucleus sampling mass in (0, 1] (with --temperature > 0)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=None, help="seed the sampler (reproducible sampled replies)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N (default: the GPU when there is one)")
    parser.add_argument("--trust_remote_code", action="store_true",
                        help="let transformers run the model folder's own code (models not built into it)")  # fmt: skip
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line of ``llmsys chat``."""
    return build_parser().parse_args(argv)


def check_flags(args: argparse.Namespace) -> None:
    """ValueError naming the flag for a value out of its range, before anything is loaded."""
    if args.max_new_tokens < 1:
        raise ValueError(f"--max_new_tokens must be >= 1, got {args.max_new_tokens}")
    if args.temperature is not None and not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise ValueError(f"--temperature must be >= 0 (0: greedy), got {args.temperature}")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise ValueError(f"--top_p must be in (0, 1], got {args.top_p}")
    if args.top_p is not None and not args.temperature:
        raise ValueError("--top_p applies when sampling; give --temperature > 0 with it")
    if args.seed is not None and not 0 <= args.seed < SEED_LIMIT:
        raise ValueError(f"--seed must be in [0, 2**32), got {args.seed}")
    if args.prompt is not None and not args.prompt.strip():
        raise ValueError("--prompt is empty; give the message to answer (or '-' to read it from stdin)")
    if args.system is not None and not args.system.strip():
        raise ValueError("--system is empty; give the system prompt, or leave the flag out")


def sampling_text(sampling) -> str:
    """How replies are picked, for the banner."""
    if sampling.temperature is None:
        return "sampling: the model's generation_config (--temperature 0 for greedy, > 0 to sample)"
    if sampling.temperature == 0:
        return "sampling: greedy"
    return f"sampling: temperature {sampling.temperature}, top_p {sampling.top_p or 1.0}"


def write(stream, text: str) -> None:
    stream.write(text)
    stream.flush()


def stream_reply(chat, sampling, prompt_ids: list[int]) -> str:
    """Print the reply to stdout as it is generated and return it; Ctrl-C stops it and propagates."""
    from ..chat.streaming import ReplyStream

    stream = ReplyStream(chat.model, chat.tokenizer, prompt_ids, sampling, chat.stop_ids)
    pieces = []
    try:
        for piece in stream:
            pieces.append(piece)
            write(sys.stdout, piece)
    except KeyboardInterrupt:
        stream.stop()
        raise
    finally:
        write(sys.stdout, "\n")
    return "".join(pieces)


def one_shot(chat, session, sampling, message: str) -> str:
    """The reply to one message (on stdout)."""
    return stream_reply(chat, sampling, session.prompt_ids(message))


def read_line(interactive: bool) -> str:
    """The next typed line (EOFError at the end of input); the prompt only when a person types."""
    if interactive:
        return input("> ")
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line


def chat_loop(chat, session, sampling) -> None:
    """Read lines until /quit or end of input; answer messages, run commands."""
    interactive = sys.stdin.isatty()
    if interactive:
        import readline  # noqa: F401  (line editing and history for input())
    print(f"llmsys chat: {chat.description}\n{sampling_text(sampling)}\n/help for commands, /quit or Ctrl-D to leave",
          file=sys.stderr)  # fmt: skip
    while True:
        try:
            line = read_line(interactive)
        except EOFError:
            write(sys.stderr, "\n" if interactive else "")
            return
        except KeyboardInterrupt:
            print("\n(Ctrl-D or /quit to leave)", file=sys.stderr)
            continue
        step = session.handle(line)
        if step.action == "quit":
            return
        if step.action == "show":
            print(step.text, file=sys.stderr)
        if step.action == "reply":
            answer(chat, session, sampling, step.text)


def answer(chat, session, sampling, message: str) -> None:
    """One exchange of the loop: the reply streamed and kept; a prompt that cannot fit or Ctrl-C keeps nothing."""
    try:
        ids = session.prompt_ids(message)
    except ValueError as err:
        print(err, file=sys.stderr)
        return
    if session.dropped:
        print(f"(the oldest {session.dropped} exchange(s) left the prompt to fit the model's context)", file=sys.stderr)
    try:
        reply = stream_reply(chat, sampling, ids)
    except KeyboardInterrupt:
        print("[reply stopped; this exchange is not kept]", file=sys.stderr)
        return
    session.add_exchange(message, reply)


def main(argv: list[str] | None = None) -> None:
    """Run ``llmsys chat`` (see the module docstring)."""
    args = parse_args(argv)
    check_flags(args)
    message = sys.stdin.read() if args.prompt == "-" else args.prompt
    if message is not None and not message.strip():
        raise ValueError("--prompt -: stdin held no message")

    from ..chat.loading import load_chat_model, resolve_chat_source
    from ..chat.session import ChatSession
    from ..chat.streaming import Sampling

    resolved = resolve_chat_source(args.model, args.template, args.trust_remote_code)
    session = ChatSession(resolved.prompt_format, system=args.system)  # checks --system before weights are read
    chat = load_chat_model(resolved, args.device)
    session.context_length = chat.context_length
    sampling = Sampling(args.max_new_tokens, args.temperature, args.top_p)
    if args.seed is not None:
        from transformers import set_seed

        set_seed(args.seed)
    if message is not None:
        one_shot(chat, session, sampling, message)
    else:
        chat_loop(chat, session, sampling)
