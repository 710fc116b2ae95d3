"""`llmsys ppl`: corpus perplexity of a saved causal LM over text files (sliding window, per token).

    llmsys ppl --model DIR --data a.txt b.txt --max_length 512 --stride 256 [--json]
    llmsys ppl --model DIR --data lines.txt --lines              # each non-empty line is a text
    llmsys ppl --model DIR --data records.jsonl --text_field text

A plain file is one text (``--lines``: one per non-empty line); a ``.jsonl`` file holds one JSON object per line
whose ``--text_field`` is a text. The files are read through once to check them (before the model loads), then
streamed: texts are scored in groups and reduced to sums, so memory does not grow with the corpus (a whole-file
text is held whole). ``--json`` prints exactly one JSON object on stdout: tokens, ppl, word_ppl,
byte_ppl, bits_per_byte, nll, words, bytes, plus texts, max_length, stride and max_length_rule (how the window
was chosen: by default min(512, the model's context); a --max_length past a learned position table is refused
before any text is read).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .parsing import CommandParser

# the package's modules import torch: imported by the functions, so `llmsys ppl --help` stays instant

DEFAULT_MAX_LENGTH = 512  # the default window, clamped to the model's context (model_limits.fit_length)

TABLE_KEYS = ("tokens", "ppl", "word_ppl", "byte_ppl", "bits_per_byte")


def build_parser() -> CommandParser:
    """The flags of `llmsys ppl`."""
    parser = CommandParser(prog="llmsys ppl", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="folder (or Hub id) of a causal LM")
    parser.add_argument("--tokenizer", help="tokenizer folder (default: the model folder)")
    parser.add_argument("--data", required=True, nargs="+", type=Path, help="text or .jsonl files")
    parser.add_argument("--lines", action="store_true", help="each non-empty line of a plain file is a text")
    parser.add_argument("--text_field", default="text", help="field holding the text in .jsonl records")
    parser.add_argument(
        "--max_length", type=int,
        help=f"window length in tokens (default: min({DEFAULT_MAX_LENGTH}, the model's context); a value past a "
        "learned position table is refused, past a RoPE model's context it runs with a warning)",
    )  # fmt: skip
    parser.add_argument("--stride", type=int, help="tokens advanced per window (default: max_length // 2)")
    parser.add_argument("--batch_size", type=int, default=8, help="windows per forward")
    parser.add_argument("--bf16", action="store_true", help="forward under bfloat16 autocast")
    parser.add_argument("--no_start_token", action="store_true", help="do not prepend bos (first token unscored)")
    parser.add_argument("--trust_remote_code", action="store_true", help="passed to from_pretrained")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse `llmsys ppl` arguments."""
    return build_parser().parse_args(argv)


def _read_utf8(path: Path) -> str:
    """A whole file's text, newlines translated as ``Path.read_text`` does (``\r\n`` and ``\r`` become ``\n``)."""
    from ..data.json_lines import not_utf8_error

    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise not_utf8_error(path, raw, err.start) from err
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _jsonl_texts(path: Path, field: str):
    """The `field` of each JSON record of a .jsonl file, one line read at a time."""
    from ..data.json_lines import json_lines_records

    for number, record in json_lines_records(path):
        if not isinstance(record.get(field), str):
            raise ValueError(f"{path}:{number} has no string field {field!r}; choose it with --text_field.")
        yield record[field]


def _file_texts(path: Path, lines: bool, text_field: str):
    """One file's texts: .jsonl records, non-empty lines (`lines`, ``str.splitlines`` boundaries), or the file."""
    if path.suffix == ".jsonl":
        yield from _jsonl_texts(path, text_field)
    elif lines:
        from ..data.json_lines import decoded_lines

        for _, line in decoded_lines(path):
            yield from (piece for piece in line.splitlines() if piece.strip())
    else:
        text = _read_utf8(path)
        if text.strip():
            yield text


def iter_texts(paths: list[Path], lines: bool = False, text_field: str = "text"):
    """Texts from the files, one at a time (a corpus of any size is never held whole): .jsonl records, non-empty
    lines (`lines`), or each whole file. A file with no text is an error naming it."""
    for path in paths:
        if path.is_dir():
            raise ValueError(f"--data {path}: is a folder; give the text files in it (e.g. {path}/*.txt).")
        if not path.is_file():
            raise ValueError(f"data file {path} does not exist.")
        found = False
        for text in _file_texts(path, lines, text_field):
            found = True
            yield text
        if not found:
            raise ValueError(f"data file {path} is empty; pass a file with text.")


def count_texts(paths: list[Path], lines: bool = False, text_field: str = "text") -> int:
    """The number of texts, read through once before the model loads: a missing file, bad UTF-8, bad JSON or a
    missing field fails here, not after hours of scoring. Holds one text at a time."""
    return sum(1 for _ in iter_texts(paths, lines, text_field))


def load_model_and_tokenizer(model_dir: str, tokenizer_dir: str | None, trust_remote_code: bool):
    """AutoModelForCausalLM + AutoTokenizer (hf_llmsys imported first so its architectures resolve)."""
    from ..data.pretrained_sources import load_causal_lm, load_tokenizer

    model = load_causal_lm(model_dir, "--model", trust_remote_code=trust_remote_code)
    flag = "--tokenizer" if tokenizer_dir else "--model (no --tokenizer given)"
    tokenizer = load_tokenizer(tokenizer_dir or model_dir, flag, trust_remote_code=trust_remote_code)
    return model, tokenizer


def format_table(summary: dict) -> str:
    """A two-column table of the headline figures."""
    rows = [
        (key, f"{summary[key]:,}" if isinstance(summary[key], int) else f"{summary[key]:.4f}") for key in TABLE_KEYS
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{key:<{width}}  {value:>14}" for key, value in rows)


def check_window_flags(max_length: int | None, stride: int | None, batch_size: int) -> None:
    """--max_length >= 2, 1 <= --stride <= --max_length, --batch_size >= 1 (max_length None: not known yet)."""
    if max_length is not None and max_length < 2:
        raise ValueError(f"--max_length must be >= 2 (a context token and a scored one), got {max_length}.")
    if stride is not None and stride < 1:
        raise ValueError(f"--stride must be >= 1, got {stride}.")
    if stride is not None and max_length is not None and stride > max_length:
        raise ValueError(
            f"--stride {stride} > --max_length {max_length} would leave tokens unscored; use --stride <= "
            f"{max_length} (equal gives disjoint windows)."
        )
    if batch_size < 1:
        raise ValueError(f"--batch_size must be >= 1, got {batch_size}.")


def fit_window(model: str, max_length: int | None, trust_remote_code: bool) -> tuple[int, str]:
    """(window length, how it was chosen) from the model's config alone, before any text or weight is read."""
    from ..data.pretrained_sources import load_config
    from ..evaluation.model_limits import config_position_limit, fit_length

    config = load_config(model, "--model", trust_remote_code=trust_remote_code)
    limit = config_position_limit(config, trust_remote_code=trust_remote_code)
    return fit_length("--max_length", max_length, limit, DEFAULT_MAX_LENGTH, warn=False)  # corpus_perplexity warns


def main(argv: list[str] | None = None) -> dict:
    """Run `llmsys ppl`; prints a table (or one JSON object) and returns the summary dict."""
    args = parse_args(argv)
    from ..evaluation.perplexity import corpus_perplexity

    check_window_flags(args.max_length, args.stride, args.batch_size)
    max_length, rule = fit_window(args.model, args.max_length, args.trust_remote_code)
    check_window_flags(max_length, args.stride, args.batch_size)
    n_texts = count_texts(args.data, args.lines, args.text_field)
    model, tokenizer = load_model_and_tokenizer(args.model, args.tokenizer, args.trust_remote_code)
    texts = iter_texts(args.data, args.lines, args.text_field)  # streamed: one group of texts in memory at a time
    result = corpus_perplexity(
        model, tokenizer, texts, max_length=max_length, stride=args.stride, batch_size=args.batch_size,
        dtype="bf16" if args.bf16 else None, add_start_token=not args.no_start_token,
    )  # fmt: skip
    stride = args.stride if args.stride is not None else max_length // 2
    summary = result.to_dict() | {"texts": n_texts, "max_length": max_length, "stride": stride}
    summary["max_length_rule"] = rule
    print(json.dumps(summary) if args.json else f"{format_table(summary)}\nmax_length {max_length}: {rule}")
    return summary
