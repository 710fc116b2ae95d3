"""A transformers fast tokenizer as llama.cpp's GGUF tokenizer metadata (``tokenizer.ggml.*``).

Two kinds, told apart by the ``tokenizers`` model inside the fast tokenizer (``backend_tokenizer``):

- byte-level BPE (GPT-2 style; ``BPE`` without byte fallback, ``ByteLevel`` decoder) -> ``tokenizer.ggml.model =
  "gpt2"``: tokens spelled in GPT-2's byte alphabet ("Ġthe"), their merges, and ``tokenizer.ggml.pre`` naming the
  pre-tokenizer split that llama.cpp must reproduce (``llama-vocab.cpp``): "gpt-2" for GPT-2's regex alone,
  "smollm" for single digits first, then GPT-2's regex. Any other split is refused: llama.cpp would cut the text
  elsewhere and give other ids.
- SentencePiece BPE as transformers converts it (``BPE`` with byte fallback, ``<0xXX>`` byte tokens, "▁" for
  spaces; LLaMA / Mistral) -> ``"llama"``: llama.cpp's SentencePiece tokenizer merges the adjacent pair whose
  merged token has the highest score, so each token scores minus the rank of the first merge that builds it, the
  order of the tokenizer's own merges (SentencePiece BPE sorts merges by the merged piece's score too). The merges
  are written as well: transformers' GGUF reader rebuilds its tokenizer from them.

Token types follow llama.cpp's converter (``convert_hf_to_gguf.py``, ``get_vocab_base``): special added tokens
CONTROL, other added tokens USER_DEFINED, ``<0xXX>`` BYTE, the unknown token UNKNOWN, ids past the tokenizer up to
the model's ``vocab_size`` UNUSED ``[PAD{i}]`` rows. Special ids, merges and the chat template come from gguf's
``SpecialVocab`` over the saved tokenizer folder, the machinery llama.cpp's converter uses; whether BOS / EOS are
added is measured by encoding a text, not parsed.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import gguf

BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")
PROBE_TEXT = "Hello world"  # any text: only the ids added around it matter


@dataclass(frozen=True)
class GgufVocab:
    """The ``tokenizer.ggml.*`` arrays of one tokenizer, each one entry per model vocabulary row."""

    model: str  # "gpt2" or "llama"
    pre: str  # llama.cpp pre-tokenizer name
    tokens: list[str]
    token_types: list[int]
    scores: list[float] | None  # SentencePiece only


def write_tokenizer(writer: gguf.GGUFWriter, tokenizer, model, vocab_size: int) -> None:
    """Add ``tokenizer``'s vocabulary, merges, special ids, add-BOS/EOS flags and chat template to ``writer``.

    Special ids missing from the tokenizer come from ``model.config``; a chat end-of-turn id that the model's
    generation config lists beside EOS (``llmsys sft`` saves one) becomes ``eot_token_id``, where llama.cpp stops.
    """
    vocab = gguf_vocab(tokenizer, vocab_size)
    writer.add_tokenizer_model(vocab.model)
    writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.token_types)
    if vocab.scores is not None:
        writer.add_token_scores(vocab.scores)
        writer.add_add_space_prefix(True)  # the "▁" SentencePiece puts in front of the text (prepend_scheme)
    special = _special_vocab(tokenizer, model.config, vocab_size)
    special.add_special_token.update(_added_specials(tokenizer))
    if (end_of_turn := _end_of_turn_id(model, special.special_token_ids.get("eos"))) is not None:
        special.special_token_ids["eot"] = end_of_turn
    special.add_to_gguf(writer, quiet=True)


def gguf_vocab(tokenizer, vocab_size: int) -> GgufVocab:
    """The GGUF vocabulary arrays of a fast tokenizer, padded to the model's ``vocab_size`` rows."""
    spec = _backend_spec(tokenizer)
    model = spec["model"]
    if model.get("type") != "BPE":
        raise ValueError(
            f"tokenizer: a {model.get('type')} model cannot be written to GGUF by this exporter; it writes byte-level "
            "BPE (GPT-2 style) and SentencePiece BPE with byte fallback (LLaMA / Mistral) tokenizers."
        )
    by_id = {index: token for token, index in tokenizer.get_vocab().items()}
    if max(by_id) >= vocab_size:
        raise ValueError(
            f"tokenizer: it has token id {max(by_id)} but the model's vocab_size is {vocab_size}; the embedding has no "
            "row for it (resize the model's token embeddings to the tokenizer before exporting)."
        )
    sentencepiece = bool(model.get("byte_fallback"))
    pre = _sentencepiece_check(spec) if sentencepiece else _byte_level_pre(spec)
    added = tokenizer.added_tokens_decoder
    unk_id = tokenizer.unk_token_id
    tokens, types = [], []
    for i in range(vocab_size):
        token = by_id.get(i)
        tokens.append(f"[PAD{i}]" if token is None else token)
        if token is None:
            types.append(gguf.TokenType.UNUSED)
        elif i == unk_id:
            types.append(gguf.TokenType.UNKNOWN)
        elif i in added:
            types.append(gguf.TokenType.CONTROL if added[i].special else gguf.TokenType.USER_DEFINED)
        elif sentencepiece and BYTE_TOKEN.fullmatch(token):
            types.append(gguf.TokenType.BYTE)
        else:
            types.append(gguf.TokenType.NORMAL)
    scores = _merge_rank_scores(tokens, model["merges"]) if sentencepiece else None
    return GgufVocab("llama" if sentencepiece else "gpt2", pre, tokens, [int(t) for t in types], scores)


def _backend_spec(tokenizer) -> dict:
    """The ``tokenizer.json`` content of a fast tokenizer (its ``tokenizers`` pipeline)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(
            f"tokenizer: {type(tokenizer).__name__} is not a fast (tokenizers-backed) tokenizer; load it with "
            "AutoTokenizer so it carries a tokenizer.json."
        )
    return json.loads(backend.to_str())


def _byte_level_pre(spec: dict) -> str:
    """llama.cpp's name for the pre-tokenizer of a byte-level BPE, or ValueError naming what differs."""
    decoder = (spec.get("decoder") or {}).get("type")
    if decoder != "ByteLevel":
        raise ValueError(
            f"tokenizer: a BPE without byte fallback needs a ByteLevel decoder (GPT-2 style), got {decoder}"
        )
    if spec.get("normalizer") is not None:
        raise ValueError(
            f"tokenizer: normalizer {spec['normalizer'].get('type')} has no llama.cpp counterpart for byte-level BPE"
        )
    pre = spec.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    *first, last = steps
    if last.get("type") != "ByteLevel" or not last.get("use_regex", True):
        raise ValueError(f"tokenizer: pre-tokenizer {json.dumps(pre)} is not GPT-2's ByteLevel split; llama.cpp's "
                         "byte-level pre-tokenizers written here are 'gpt-2' and 'smollm'")  # fmt: skip
    if last.get("add_prefix_space"):
        raise ValueError(
            "tokenizer: add_prefix_space=True (a space added before the text) has no llama.cpp byte-level "
            "counterpart; export a tokenizer loaded with add_prefix_space=False."
        )
    if not first:
        return "gpt-2"
    if first == [{"type": "Digits", "individual_digits": True}]:
        return "smollm"  # llama.cpp LLAMA_VOCAB_PRE_TYPE_SMOLLM: "\p{N}" before GPT-2's regex
    raise ValueError(f"tokenizer: pre-tokenizer steps {json.dumps(first)} before ByteLevel are not one llama.cpp "
                     "knows ('gpt-2': none; 'smollm': single digits)")  # fmt: skip


def _sentencepiece_check(spec: dict) -> str:
    """Require the "▁"-for-space convention llama.cpp's SentencePiece tokenizer applies; the pre name is "default"."""
    pre, normalizer = spec.get("pre_tokenizer") or {}, spec.get("normalizer") or {}
    metaspace = (
        pre.get("type") == "Metaspace"
        and pre.get("prepend_scheme", "always") in ("first", "always")
        and not pre.get("split", True)  # llama.cpp merges over the whole text, not word by word
    )
    legacy = pre == {} and [n.get("type") for n in normalizer.get("normalizers", [])] == ["Prepend", "Replace"]
    if not (metaspace or legacy):
        raise ValueError(
            f"tokenizer: SentencePiece-style BPE with pre-tokenizer {pre.get('type')} and normalizer "
            f"{normalizer.get('type')}; llama.cpp's tokenizer puts '▁' before the text and for each space "
            "(Metaspace, or LLaMA's Prepend + Replace normalizer)"
        )
    return "default"


def _merge_rank_scores(tokens: list[str], merges: list) -> list[float]:
    """Score of each token: minus the rank of the first merge producing it (0.0 for tokens no merge builds)."""
    rank: dict[str, int] = {}
    for r, merge in enumerate(merges):
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        rank.setdefault(left + right, r)
    return [-float(rank[t]) if t in rank else 0.0 for t in tokens]


def _special_vocab(tokenizer, model_config, vocab_size: int) -> gguf.SpecialVocab:
    """gguf's reading of special ids, merges and chat template from the saved tokenizer (and config.json)."""
    with tempfile.TemporaryDirectory(prefix="llmsys-gguf-tokenizer-") as tmp:
        tokenizer.save_pretrained(tmp)
        (Path(tmp) / "config.json").write_text(json.dumps({
            f"{kind}_token_id": getattr(model_config, f"{kind}_token_id", None) for kind in ("bos", "eos", "pad")
        }))  # fmt: skip
        special = gguf.SpecialVocab(tmp, load_merges=True, n_vocab=vocab_size)
    special.add_special_token.clear()  # measured by _added_specials instead of parsed from post-processor JSON
    if tokenizer.chat_template is not None:
        special.chat_template = tokenizer.chat_template
    return special


def _end_of_turn_id(model, eos_id: int | None) -> int | None:
    """The first id other than EOS among the generation config's stop ids, or None."""
    stops = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    stops = stops if isinstance(stops, list) else [stops]
    return next((i for i in stops if isinstance(i, int) and i != eos_id), None)


def _added_specials(tokenizer) -> dict[str, bool]:
    """Whether encoding adds BOS in front and EOS at the end, measured on a text."""
    bare = tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"]
    full = tokenizer(PROBE_TEXT, add_special_tokens=True)["input_ids"]
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    return {
        "bos": bos is not None and full[:1] == [bos] and bare[:1] != [bos],
        "eos": eos is not None and full[-1:] == [eos] and bare[-1:] != [eos],
    }
