"""The one loader of the models and tokenizers a user names to an `llmsys` command (or to our Python API).

Every command that reads a model, a config or a tokenizer the user named calls these functions, never
transformers' Auto classes directly, so each gets the same answers:

- a model folder, a Hub id, or a PEFT adapter folder (``adapter_config.json``, what ``llmsys sft --lora_r N``
  saves): the base named by ``base_model_name_or_path`` is loaded and the adapter put on it (PEFT;
  ``merge_adapter=True`` merges it in, as ``llmsys export`` needs); adapters saved against the fused projections of
  earlier hf-llmsys models are rewritten first (`checkpoints.fused_adapters`). The tokenizer is the adapter
  folder's when it has one, else the base's; the config is the base's.
- clear errors where transformers' would mislead, each naming the flag the user gave: transformers takes any
  string that is not an existing folder for a Hub repo id (a mistyped path reads "Repo id must be in the form
  'repo_name' or 'namespace/repo_name'") and a folder without ``config.json`` for an unknown model ("Unrecognized
  model ... Should have a `model_type` key"); a tokenizer folder of only ``vocab.json`` + ``merges.txt`` asks for
  sentencepiece. Here a path that cannot be a repo id and does not exist is "no such folder"; a folder without
  ``config.json`` says what it holds instead and which saved models are inside it (``checkpoint-*``); a tokenizer
  folder without tokenizer files names them; a bare GPT-2 vocabulary (``vocab.json`` + ``merges.txt`` holding
  ``<|endoftext|>``, as in the GPT-2 release) loads as ``GPT2Tokenizer``.

``import hf_llmsys`` changes none of transformers' own functions: ``AutoModelForCausalLM.from_pretrained`` behaves
as without the plugin; these checks live here, where the user's intent is known.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"
# What AutoTokenizer can build a tokenizer from (any one is enough).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model")
TOKENIZER_CLASS_FILES = ("tokenizer_config.json", "tokenizer.json", "config.json")  # name the tokenizer's class
SENTENCEPIECE_FILES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
GPT2_END_OF_TEXT = "<|endoftext|>"
# transformers model types whose folders one of our classes reads with the same module names (``model_class=``)
OUR_READERS = {"llama": "LlmsysLlamaForCausalLM"}


def looks_like_local_path(source: str) -> bool:
    """Whether `source` is meant as a local path: absolute, ./ ../ ~, more than one slash (a repo id has at most
    one), or a first component that exists as a local folder (``runs/tiny`` next to ``runs/``)."""
    if source.startswith(("/", "./", "../", "~")) or source.count("/") > 1 or (os.sep != "/" and os.sep in source):
        return True
    head = source.split("/", 1)[0]
    return "/" in source and Path(head).is_dir()


def local_folder(source: str | os.PathLike) -> Path | None:
    """The existing local folder `source` names (``~`` expanded), or None (a Hub id)."""
    path = Path(os.fspath(source)).expanduser()
    return path if path.is_dir() else None


def _saved_models_inside(folder: Path) -> list[str]:
    """Subfolders of `folder` that hold a config.json (checkpoints, a model saved one level down), sorted."""
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and (p / "config.json").is_file())


def check_source(source: str | os.PathLike, flag: str, needs: tuple[str, ...] = ("config.json",)) -> None:
    """ValueError naming `flag` when `source` is a local path that is missing, a file, or a folder lacking every file
    of `needs` (the message says what the folder holds and which saved models are inside it)."""
    text = os.fspath(source)
    path = Path(text).expanduser()
    if path.is_dir():
        if needs and not any((path / name).is_file() for name in needs):
            inside = _saved_models_inside(path)
            held = sorted(p.name for p in path.iterdir())[:6]
            contents = f"it holds {', '.join(held)}" if held else "it is empty"
            hint = f"; saved models inside it: {', '.join(inside[:4])}" if inside else ""
            raise ValueError(f"{flag} {text}: the folder has none of {', '.join(needs)} ({contents}){hint}; point "
                             f"{flag} at the folder that save_pretrained wrote")  # fmt: skip
    elif path.exists():
        raise ValueError(f"{flag} {text}: is a file; give the folder that holds it")
    elif looks_like_local_path(text):
        raise ValueError(f"{flag} {text}: no such folder (a local path, not a Hub repo id)")


def read_source_json(source: str, name: str) -> dict | None:
    """A JSON file of the folder or Hub repo `source` (None when it has none)."""
    from transformers.utils import cached_file

    # None for a file the folder / repo lacks, and (as transformers) for an unreachable Hub: AutoConfig says that
    path = cached_file(source, name, _raise_exceptions_for_missing_entries=False)
    if path is None:
        return None
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{source}/{name}: not valid JSON ({err})") from None


def _source_text(source: str | os.PathLike) -> str:
    """`source` as transformers takes it: an existing local path with ``~`` expanded, else as given."""
    folder = local_folder(source)
    return str(folder) if folder is not None else os.fspath(source)


def adapter_base(source: str | os.PathLike, flag: str = "--model") -> str | None:
    """The base model of a PEFT adapter folder or repo (None: `source` is not an adapter); ValueError when its
    ``adapter_config.json`` names no base or a local base that is gone."""
    source = _source_text(source)
    adapter = read_source_json(source, ADAPTER_CONFIG)
    if adapter is None:
        return None
    base = adapter.get("base_model_name_or_path")
    if not base:
        raise ValueError(f"{flag} {source}: {ADAPTER_CONFIG} names no base model (base_model_name_or_path); set it to "
                         "the folder or Hub id of the model the adapter was trained on")  # fmt: skip
    check_source(base, f"{flag} {source}: the adapter's base_model_name_or_path")
    return base


def load_config(source: str | os.PathLike, flag: str = "--model", **kwargs):
    """``AutoConfig`` of a model folder, Hub id or adapter (its base's), after `check_source`."""
    from transformers import AutoConfig

    import hf_llmsys  # noqa: F401  (registers our architectures with the Auto classes)

    check_source(source, flag, needs=("config.json", ADAPTER_CONFIG))
    source = _source_text(source)
    return AutoConfig.from_pretrained(adapter_base(source, flag) or source, **kwargs)


def _gpt2_vocabulary(vocab_file: Path) -> bool:
    """Whether vocab.json is GPT-2's byte-level BPE vocabulary (it holds <|endoftext|>)."""
    try:
        vocab = json.loads(vocab_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(vocab, dict) and GPT2_END_OF_TEXT in vocab


def _load_bare_bpe(folder: Path, flag: str, **kwargs):
    """vocab.json + merges.txt with nothing naming their class: GPT-2's as GPT2Tokenizer, else a ValueError."""
    if not _gpt2_vocabulary(folder / "vocab.json"):
        raise ValueError(
            f"{flag} {folder}: vocab.json + merges.txt but no tokenizer_config.json or tokenizer.json, so AutoTokenizer "
            "cannot tell which tokenizer they are; load them with their class (e.g. RobertaTokenizer"
            '.from_pretrained) and save_pretrained it, or add tokenizer_config.json with its "tokenizer_class"'
        )
    from transformers import GPT2Tokenizer

    for name in ("trust_remote_code", "use_fast", "tokenizer_type"):
        kwargs.pop(name, None)
    return GPT2Tokenizer.from_pretrained(str(folder), **kwargs)


def load_tokenizer(source: str | os.PathLike, flag: str = "--tokenizer", **kwargs):
    """The tokenizer of a folder, Hub id or adapter folder (its own, else its base's), with the errors of the module
    docstring. ``gguf_file=`` reads the tokenizer a GGUF file carries."""
    from transformers import AutoTokenizer

    check_source(source, flag, needs=())
    source = _source_text(source)
    folder = local_folder(source)
    if folder is not None and not kwargs.get("gguf_file"):
        names = {p.name for p in folder.iterdir()}
        if not names & {*TOKENIZER_FILES, *SENTENCEPIECE_FILES}:
            base = adapter_base(source, flag)
            if base is None:
                raise ValueError(f"{flag} {source}: the folder has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                                 "save it there with tokenizer.save_pretrained(folder), or name the folder that "
                                 "holds it")  # fmt: skip
            return load_tokenizer(base, f"{flag} {source}: the adapter's base_model_name_or_path", **kwargs)
        if {"vocab.json", "merges.txt"} <= names and not names & {*TOKENIZER_CLASS_FILES, *SENTENCEPIECE_FILES}:
            return _load_bare_bpe(folder, flag, **kwargs)
    return AutoTokenizer.from_pretrained(source, **kwargs)


def _model_class(config, auto_class, prefer_ours: bool):
    """The class that loads a model of `config`: `auto_class`, or with `prefer_ours` our class for a transformers
    model type it reads with the same module names (`OUR_READERS`: a ``llama`` folder as ``LlmsysLlamaForCausalLM``)."""
    if prefer_ours and config.model_type in OUR_READERS:
        import hf_llmsys

        return getattr(hf_llmsys, OUR_READERS[config.model_type])
    return auto_class


def load_model(source: str | os.PathLike, flag: str = "--model", *, merge_adapter: bool = False,
               prefer_ours: bool = False, **kwargs):  # fmt: skip
    """A model folder, Hub id or PEFT adapter folder (base + adapter; merged with `merge_adapter`), as a causal LM
    or, for an encoder-decoder config, a seq2seq LM. `prefer_ours` reads a transformers ``llama`` folder (or an
    adapter's ``llama`` base) with our Llama class, which has the same module names. ``kwargs`` go to
    ``from_pretrained`` (of the base, for an adapter)."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    config = load_config(source, flag, trust_remote_code=kwargs.get("trust_remote_code", False))
    auto_class = AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) else AutoModelForCausalLM
    source = _source_text(source)
    base = adapter_base(source, flag)
    if base is None:
        return _model_class(config, auto_class, prefer_ours).from_pretrained(source, **kwargs)
    from peft import PeftModel

    if (folder := local_folder(source)) is not None:
        from ..checkpoints.fused_adapters import upgrade_fused_adapter

        upgrade_fused_adapter(folder)
    base_model = load_model(base, f"{flag} {source}: the adapter's base_model_name_or_path", merge_adapter=True,
                            prefer_ours=prefer_ours, **kwargs)  # fmt: skip
    model = PeftModel.from_pretrained(base_model, source)
    if not merge_adapter:
        return model
    merged = model.merge_and_unload()
    merged.name_or_path = (
        source  # a LoRA trained on it next (llmsys sft) names this adapter as its base, not the bare base
    )
    return merged


def load_causal_lm(source: str | os.PathLike, flag: str = "--model", **kwargs):
    """`load_model` for a command that takes a causal (decoder-only) LM: an encoder-decoder is refused before any
    weight is read, naming `flag`."""
    config = load_config(source, flag, trust_remote_code=kwargs.get("trust_remote_code", False))
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"{flag} {os.fspath(source)}: {config.model_type} is an encoder-decoder; this command takes a "
                         "causal (decoder-only) LM")  # fmt: skip
    return load_model(source, flag, **kwargs)
