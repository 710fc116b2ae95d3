"""Loading a model or tokenizer the user named: a local folder that is missing or incomplete is said so.

transformers treats any string that is not an existing folder as a Hub repo id, so a mistyped local path comes
back as "Repo id must be in the form 'repo_name' or 'namespace/repo_name'", and a model folder saved without its
tokenizer as "You need to have sentencepiece or tiktoken installed". Both name neither the argument nor the fix.
"""

from __future__ import annotations

import os
from pathlib import Path

# What AutoTokenizer can build a tokenizer from (any one is enough).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model")


def looks_like_local_path(source: str) -> bool:
    """A string the user meant as a folder: absolute, relative with ./ or ../, ~, more than one slash, or whose
    first component is an existing folder (see `hf_llmsys.auto_loading.cannot_be_a_repo_id`)."""
    from ..auto_loading import cannot_be_a_repo_id

    return cannot_be_a_repo_id(source)


def check_source(source: str | os.PathLike, flag: str, needs: tuple[str, ...] = ("config.json",)) -> None:
    """Raise a ValueError naming `flag` when `source` is a local path that is missing or lacks every file of `needs`."""
    text = str(source)
    path = Path(text).expanduser()
    if path.is_dir():
        if needs and not any((path / name).is_file() for name in needs):
            raise ValueError(f"{flag} {text}: the folder has none of {', '.join(needs)}; point {flag} at the folder "
                             "that save_pretrained wrote")  # fmt: skip
    elif path.exists():
        raise ValueError(f"{flag} {text}: is a file; give the folder that holds it")
    elif looks_like_local_path(text):
        raise ValueError(f"{flag} {text}: no such folder")


def load_tokenizer(source: str | os.PathLike, flag: str = "--tokenizer", **kwargs):
    """`AutoTokenizer.from_pretrained(source)` after `check_source` for the tokenizer files."""
    from transformers import AutoTokenizer

    check_source(source, flag, TOKENIZER_FILES)
    return AutoTokenizer.from_pretrained(
        str(Path(str(source)).expanduser()) if Path(str(source)).expanduser().exists() else source, **kwargs
    )


def load_causal_lm(source: str | os.PathLike, flag: str = "--model", **kwargs):
    """`AutoModelForCausalLM.from_pretrained(source)` after `check_source` for config.json."""
    from transformers import AutoModelForCausalLM

    import hf_llmsys  # noqa: F401  (registers our architectures with the Auto classes)

    check_source(source, flag)
    return AutoModelForCausalLM.from_pretrained(source, **kwargs)


def load_seq2seq_lm(source: str | os.PathLike, flag: str = "--model", **kwargs):
    """`AutoModelForSeq2SeqLM.from_pretrained(source)` after `check_source` for config.json (llmsys_t5, T5, ...)."""
    from transformers import AutoModelForSeq2SeqLM

    import hf_llmsys  # noqa: F401  (registers our architectures with the Auto classes)

    check_source(source, flag)
    return AutoModelForSeq2SeqLM.from_pretrained(source, **kwargs)
