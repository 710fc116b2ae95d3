"""Clear errors from transformers' Auto classes for a local folder that is missing or incomplete.

transformers takes any string that is not an existing folder for a Hub repo id and a folder without config.json for
an unknown model, so a mistyped path reads "Repo id must be in the form 'repo_name' or 'namespace/repo_name'", a
folder without config.json "Unrecognized model ... Should have a `model_type` key", and a tokenizer folder holding
only ``vocab.json`` + ``merges.txt`` "You need to have sentencepiece or tiktoken installed". None of these names
the folder's real problem or the fix.

`install()` (run when hf_llmsys is imported) wraps ``from_pretrained`` of ``AutoConfig``, ``AutoTokenizer`` and
every ``AutoModel*`` class (each subclass of ``_BaseAutoModelClass`` holds its own copy of the function) with a
check that runs BEFORE transformers and only raises where transformers would fail anyway:

- a path that cannot be a repo id (``/…``, ``./…``, ``../…``, ``~…``, more than one ``/``, or whose first
  component is an existing local folder) and does not exist: ``OSError(ENOENT)`` "no such folder"
  (transformers raised OSError too);
- a tokenizer folder with no tokenizer file and no config.json: ValueError naming the files it needs;
- an existing folder without ``config.json`` (in ``subfolder`` if given) where a config is needed (no ``config=``,
  ``gguf_file=`` and no PEFT ``adapter_config.json``, all of which transformers loads without one): ValueError
  (as transformers), naming the folder, what it holds instead and where a saved model is (``checkpoint-*``);
- a tokenizer folder with ``vocab.json`` + ``merges.txt`` and nothing that names its class (no
  ``tokenizer_config.json``, ``tokenizer.json``, ``config.json``): a GPT-2 vocabulary (it holds
  ``<|endoftext|>``) loads as ``GPT2Tokenizer`` (byte-level BPE, GPT-2's special tokens, what these two files are
  in the GPT-2 release); any other gets a ValueError saying which file is missing and how to load it.

Everything else (Hub ids, complete folders, remote code) goes to transformers unchanged.
"""

from __future__ import annotations

import errno
import functools
import json
import os
from pathlib import Path

TOKENIZER_CLASS_FILES = ("tokenizer_config.json", "tokenizer.json", "config.json")
SENTENCEPIECE_FILES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
TOKENIZER_FILES = (*TOKENIZER_CLASS_FILES, "vocab.json", "vocab.txt", "tiktoken.model", *SENTENCEPIECE_FILES)
GPT2_END_OF_TEXT = "<|endoftext|>"
WRAPPED = "__llmsys_checks_local_source__"


def cannot_be_a_repo_id(source: str) -> bool:
    """Whether `source` is meant as a local path: absolute, ./ ../ ~, more than one slash (a repo id has at most
    one), or a first component that exists as a local folder (``runs/tiny`` next to ``runs/``)."""
    if source.startswith(("/", "./", "../", "~")) or source.count("/") > 1 or (os.sep != "/" and os.sep in source):
        return True
    head = source.split("/", 1)[0]
    return "/" in source and Path(head).is_dir()


def check_exists(source, what: str) -> Path | None:
    """The local folder `source` names (None: a Hub id, left to transformers); OSError when it is missing."""
    if not isinstance(source, (str, os.PathLike)):
        return None
    text = os.fspath(source)
    path = Path(text).expanduser()
    if path.exists():
        return path
    if cannot_be_a_repo_id(text):
        raise OSError(
            errno.ENOENT, f"no such folder (a local path, not a Hub repo id); give the folder of a saved {what}", text
        )
    return None


def saved_models_inside(folder: Path) -> list[str]:
    """Subfolders of `folder` that hold a config.json (checkpoints, a model saved one level down), sorted."""
    with_config = [p for p in folder.iterdir() if p.is_dir() and (p / "config.json").is_file()]
    return sorted(p.name for p in with_config)


def check_has_config(source, kwargs: dict) -> None:
    """ValueError when `source` is an existing folder without the config.json transformers needs here."""
    path = check_exists(source, "model")
    if path is None or not path.is_dir() or kwargs.get("config") is not None or kwargs.get("gguf_file"):
        return
    folder = path / kwargs["subfolder"] if kwargs.get("subfolder") else path
    if (folder / "config.json").is_file() or (folder / "adapter_config.json").is_file() or not folder.is_dir():
        return
    inside = saved_models_inside(folder)
    held = sorted(p.name for p in folder.iterdir())[:6]
    hint = f"; saved models inside it: {', '.join(inside[:4])}" if inside else ""
    contents = f"it holds {', '.join(held)}" if held else "it is empty"
    raise ValueError(
        f"{folder}: no config.json ({contents}){hint}; give the folder that save_pretrained wrote (config.json "
        "with the weights)"
    )


def gpt2_vocabulary(vocab_file: Path) -> bool:
    """Whether vocab.json is GPT-2's byte-level BPE vocabulary (it holds <|endoftext|>)."""
    try:
        vocab = json.loads(vocab_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(vocab, dict) and GPT2_END_OF_TEXT in vocab


def bare_bpe_files(source, kwargs: dict) -> Path | None:
    """The folder when it holds vocab.json + merges.txt and no file that names the tokenizer class, else None."""
    path = check_exists(source, "tokenizer")
    if path is None or not path.is_dir():
        return None
    folder = path / kwargs["subfolder"] if kwargs.get("subfolder") else path
    names = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    if {"vocab.json", "merges.txt"} <= names and not names & {*TOKENIZER_CLASS_FILES, *SENTENCEPIECE_FILES}:
        return folder
    return None


def load_bare_bpe(folder: Path, *args, **kwargs):
    """A GPT-2 vocabulary as GPT2Tokenizer; any other vocab.json + merges.txt: a ValueError naming the fix."""
    if not gpt2_vocabulary(folder / "vocab.json"):
        raise ValueError(
            f"{folder}: vocab.json + merges.txt but no tokenizer_config.json or tokenizer.json, so AutoTokenizer "
            "cannot tell which tokenizer they are; load them with their class (e.g. RobertaTokenizer"
            '.from_pretrained) and save_pretrained it, or add tokenizer_config.json with its "tokenizer_class"'
        )
    from transformers import GPT2Tokenizer

    kwargs.pop("subfolder", None)
    for name in ("trust_remote_code", "use_fast", "tokenizer_type"):
        kwargs.pop(name, None)
    return GPT2Tokenizer.from_pretrained(str(folder), *args, **kwargs)


def _wrap(owner: type, check, replace=None) -> None:
    """Wrap the classmethod ``owner.from_pretrained`` with `check(source, kwargs)` (and an optional `replace`
    that returns a loader to use instead of transformers'); idempotent."""
    original = owner.__dict__["from_pretrained"].__func__
    if getattr(original, WRAPPED, False):
        return

    @functools.wraps(original)
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        check(pretrained_model_name_or_path, kwargs)
        if replace is not None and (folder := replace(pretrained_model_name_or_path, kwargs)) is not None:
            return load_bare_bpe(folder, *args, **kwargs)
        return original(cls, pretrained_model_name_or_path, *args, **kwargs)

    setattr(from_pretrained, WRAPPED, True)
    owner.from_pretrained = classmethod(from_pretrained)


def check_tokenizer_folder(source, kwargs: dict) -> None:
    """OSError for a missing local folder; ValueError for a folder with no file a tokenizer loads from."""
    path = check_exists(source, "tokenizer")
    if path is None or not path.is_dir():
        return
    folder = path / kwargs["subfolder"] if kwargs.get("subfolder") else path
    if kwargs.get("gguf_file"):  # the tokenizer is read from the GGUF file, which transformers checks itself
        return
    if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(
            f"{folder}: no tokenizer files (none of {', '.join(TOKENIZER_FILES)}); give the folder that the "
            "tokenizer's save_pretrained wrote"
        )


def auto_model_classes() -> list[type]:
    """``_BaseAutoModelClass`` and all its subclasses (AutoModel, AutoModelForCausalLM, ...)."""
    import transformers.models.auto.modeling_auto  # noqa: F401  (defines the subclasses)
    from transformers.models.auto.auto_factory import _BaseAutoModelClass

    found, todo = [], [_BaseAutoModelClass]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return found


def install() -> None:
    """Wrap AutoConfig, every AutoModel* and AutoTokenizer ``from_pretrained`` (see the module docstring)."""
    from transformers import AutoConfig, AutoTokenizer

    _wrap(AutoConfig, check_has_config)
    for cls in auto_model_classes():
        if "from_pretrained" in cls.__dict__:
            _wrap(cls, check_has_config)
    _wrap(AutoTokenizer, check_tokenizer_folder, replace=bare_bpe_files)
