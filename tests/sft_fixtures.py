"""Local tokenizers and records for the instruction-tuning tests (nothing is downloaded).

- `byte_bpe()`: our byte-level BPE (GPT-2 style: spaces attach to the next word, no BOS added);
- `sentencepiece_like(kind)`: a `tokenizers` Unigram with the Metaspace pre-tokenizer (SentencePiece's "▁"
  convention); ``kind="llama"`` adds ``<s>`` in front (LLaMA), ``kind="t5"`` appends ``</s>`` (T5);
- `gpt2()`: the real GPT-2 tokenizer files from the shared data folder, or None when absent
  (``add_prefix_space=True``: the RoBERTa / BART convention of a space added in front of the text);
- `mistral_sentencepiece()`: a REAL LLaMA-style SentencePiece tokenizer (Mistral-7B v0.1's: BPE with byte
  fallback and the dummy-prefix "▁", ``<s>`` BOS), fetched from PyPI by ``scripts/fetch_sentencepiece_tokenizer.py``
  into a cache outside the repository, or None when it was not fetched;
- `t5_unigram()`: transformers' `T5Tokenizer` (T5's own pipeline: Unigram, whitespace split, Metaspace "▁" before
  every word, ``</s>`` appended, no BOS) over a Unigram vocabulary trained here: no PyPI package we know of ships
  T5's ``spiece.model``, so the vocabulary is local while the tokenization rules are T5's.
"""

from __future__ import annotations

import functools
import json
import os
import random
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

SHARED_DATA = Path(os.environ.get("LLMSYS_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))

RECORDS = [
    {"instruction": "Give three tips for staying healthy.", "input": "", "output": "Eat well, sleep, and move."},
    {"instruction": "Translate to French.", "input": "Good morning, friend.", "output": "Bonjour, mon ami."},
    {"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"},
    {"instruction": "Name the capital of France.", "output": "Paris"},
    {"instruction": "Say hi with an emoji.", "input": "", "output": ":) hi"},
    {"instruction": "Continue.", "input": "\n", "output": "\n\nIndented\n  text"},
]

TRAINING_TEXT = [
    "Below is an instruction that describes a task. Write a response that appropriately completes the request.",
    "### Instruction: ### Input: ### Response: Paris is the capital of France. Bonjour, mon ami.",
    "Eat well, sleep, and move. Give three tips for staying healthy. Translate to French. Add the numbers 2 and 3.",
    "0 1 2 3 4 5 6 7 8 9 reverse sort add digits :) hi emoji Indented text continue",
] * 20


@functools.cache
def byte_bpe() -> PreTrainedTokenizerFast:
    """Our byte-level BPE trained on a little template-like text."""
    from hf_llmsys.data.tokenizer import train_bpe_tokenizer

    return train_bpe_tokenizer(TRAINING_TEXT, vocab_size=400)


def _unigram() -> Tokenizer:
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=300, special_tokens=["<pad>", "</s>", "<unk>", "<s>"], unk_token="<unk>", show_progress=False
    )
    tok.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    return tok


@functools.cache
def sentencepiece_like(kind: str = "llama") -> PreTrainedTokenizerFast:
    """A SentencePiece-style Unigram tokenizer; "llama": BOS <s> prepended, "t5": </s> appended."""
    tok = _unigram()
    if kind == "llama":
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
        )
    else:
        tok.post_processor = processors.TemplateProcessing(
            single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", tok.token_to_id("</s>"))]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )


SPM_TOKENIZER_DIR = Path(
    os.environ.get("LLMSYS_SPM_TOKENIZER_DIR", Path.home() / ".cache" / "hf_llmsys" / "mistral-7b-v0.1-tokenizer")
)
SPM_FETCH = "python scripts/fetch_sentencepiece_tokenizer.py"


@functools.cache
def mistral_sentencepiece():
    """Mistral-7B v0.1's SentencePiece tokenizer (pad = EOS) from the fetched cache, or None when absent."""
    if not (SPM_TOKENIZER_DIR / "tokenizer.json").is_file():
        return None
    tok = AutoTokenizer.from_pretrained(SPM_TOKENIZER_DIR)
    tok.pad_token = tok.eos_token
    return tok


@functools.cache
def t5_unigram():
    """transformers' T5Tokenizer over a locally trained Unigram vocabulary (see module doc)."""
    from transformers import T5Tokenizer

    vocab = json.loads(_unigram().to_str())["model"]["vocab"]
    return T5Tokenizer(vocab=[tuple(v) for v in vocab], extra_ids=0)


def gpt2(tmp_dir: Path, **options):
    """The real GPT-2 BPE from the shared data folder (a tokenizer_config.json written beside it), or None.

    `options` go to ``from_pretrained`` (e.g. ``add_prefix_space=True``)."""
    src = SHARED_DATA / "tokenizers" / "gpt2"
    if not (src / "vocab.json").exists():
        return None
    tmp_dir.mkdir(parents=True, exist_ok=True)
    for name in ("vocab.json", "merges.txt"):
        (tmp_dir / name).write_bytes((src / name).read_bytes())
    (tmp_dir / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))
    tok = AutoTokenizer.from_pretrained(tmp_dir, **options)
    tok.pad_token = tok.eos_token
    return tok


def reverse_task(n: int, seed: int, length: tuple[int, int] = (3, 5)) -> list[dict]:
    """Records of a learnable synthetic task: reverse a short string of digits (distinct prompts per seed)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        digits = " ".join(rng.choice("0123456789") for _ in range(rng.randint(*length)))
        out.append({"instruction": "Reverse the digits.", "input": digits, "output": " ".join(digits.split()[::-1])})
    return out


def reverse_task_split(n_held_out: int, seed: int, digits: int = 3) -> tuple[list[dict], list[dict]]:
    """(training records, held-out records) of the reverse task: every `digits`-digit input exactly once, shuffled
    by `seed`; the first `n_held_out` are held out, so no held-out prompt is ever trained on (by construction)."""
    inputs = [" ".join(f"{i:0{digits}d}") for i in range(10**digits)]
    random.Random(seed).shuffle(inputs)
    records = [{"instruction": "Reverse the digits.", "input": x, "output": " ".join(x.split()[::-1])} for x in inputs]
    return records[n_held_out:], records[:n_held_out]


def task_tokenizer(records: list[dict]) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on the rendered task records (digits stay single tokens)."""
    from hf_llmsys.data.prompt_templates import SHORT
    from hf_llmsys.data.tokenizer import train_bpe_tokenizer

    return train_bpe_tokenizer(["".join(SHORT.split(r)) for r in records], vocab_size=400)


def base_model_config(model_type: str, tokenizer, hidden: int = 64, layers: int = 2, max_positions: int = 64):
    """A tiny randomly initialised config of one of our three architectures for `tokenizer`."""
    from hf_llmsys.models import LlmsysGPT3Config, LlmsysLlamaConfig, LlmsysT5Config

    ids = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    if model_type == "llmsys_llama":
        return LlmsysLlamaConfig(
            vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
            num_attention_heads=4, max_position_embeddings=max_positions, bos_token_id=tokenizer.bos_token_id, **ids,
        )  # fmt: skip
    if model_type == "llmsys_gpt3":
        return LlmsysGPT3Config(
            vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
            max_position_embeddings=max_positions, attention_layout=["dense", "local"], local_window=16,
            bos_token_id=tokenizer.bos_token_id, **ids,
        )  # fmt: skip
    return LlmsysT5Config(
        vocab_size=len(tokenizer), d_model=hidden, d_ff=2 * hidden, d_kv=hidden // 4, num_heads=4, num_layers=layers,
        num_decoder_layers=layers, dropout_rate=0.0, decoder_start_token_id=tokenizer.pad_token_id, **ids,
    )  # fmt: skip


def save_base_model(folder: Path, model_type: str, tokenizer, seed: int = 0, **shape) -> Path:
    """Save a randomly initialised tiny model and its tokenizer: the 'base model' an SFT test fine-tunes."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    torch.manual_seed(seed)
    config = base_model_config(model_type, tokenizer, **shape)
    auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    auto.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_records(path: Path, records: list[dict]) -> Path:
    """Records as a JSON list file."""
    path.write_text(json.dumps(records))
    return path


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run fastest on one intra-op thread (more threads only contend on 2 cores); restored afterwards.

    Autouse in every module that imports it (``from sft_fixtures import one_thread``)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
