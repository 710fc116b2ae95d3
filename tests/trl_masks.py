"""Our SFT label masks against TRL 1.16 SFTTrainer's, record by record, every difference classified by what explains
it, each explanation checked, not assumed (the parity tests: test_sft_vs_trl.py, test_sft_chat_templates.py).

Both sides get the same records, tokenizer, prompt template and ``max_length``. Our `SFTExampleEncoder`
(`ConversationEncoder` for the chat template) against the ``input_ids`` / ``labels`` columns that ``SFTTrainer``
builds at dataset preparation from a prompt-completion dataset (``completion_only_loss=True``,
``truncation_mode="keep_start"``; the bench's `trl_rows` / `trl_config`, the TRL settings its speed and learning
parts train with). Categories (`classify`):

- ``seam_merge``: the two tokenizations of the same text differ, first at the prompt/response seam (expected 0:
  both tokenize prompt + response as one text, a straddling token supervised on both sides).
- ``mask_shift``: same ids, the masks differ only in tokens right at the boundary that decode to whitespace.
- ``trl_double_eos``: TRL appends the EOS as text AND tokenizes with special tokens, so a tokenizer whose
  post-processor appends ``</s>`` (T5's) gets two EOS; checked: TRL's row is ours with one more supervised EOS.
- ``truncation``: the example exceeds ``max_length``; TRL keeps the first ``max_length`` tokens, we cut the prompt
  first and keep the response and its EOS. Checked: TRL's row is its untruncated row cut at ``max_length``.
- ``unexplained``: anything else (a defect on one side).

Conversations (`compare_conversations`): our conversation labeller on the UNTAGGED template against TRL's
``assistant_only_loss=True`` on a ``{% generation %}``-marked copy (TRL's own where it knows the template, else the
family's, `chat_template_fixtures.py`); differences are ``whitespace_edge`` (same ids, each run of differing labels
decodes to whitespace and touches a token both supervise: one whitespace rule on our side, conversation_labels.py)
or ``unexplained``. A conversation the template itself refuses (Mistral's on a system turn) is on neither side.
"""

from __future__ import annotations

import copy
import json
import tempfile
import warnings
from collections import Counter
from pathlib import Path

from chat_template_fixtures import CHAT_FAMILIES, template_text
from sft_fixtures import SHARED_DATA, gpt2, mistral_sentencepiece

from benchmarks.sft_vs_trl import trl_config, trl_rows
from hf_llmsys.data import IGNORE_INDEX, ConversationEncoder, ConversationTemplate, SFTExampleEncoder

DEFAULT_RECORDS = SHARED_DATA / "alpaca_5000.json"
CONVERSATION_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "conversations" / "multi_turn.jsonl"
CONVERSATION_CATEGORIES = ("identical", "whitespace_edge", "unexplained")
TOKENIZER_FAMILIES = ("gpt2", "gpt2_prefix_space", "mistral", "t5_unigram")


def load_tokenizer(family: str, workdir: Path, records: list[dict] | None = None):
    """One of `TOKENIZER_FAMILIES` (``gpt2_prefix_space``: GPT-2 with ``add_prefix_space=True``; ``t5_unigram``: T5's
    rules over a vocabulary trained on `records`); raises ValueError naming what is missing."""
    if family == "t5_unigram":
        return t5_unigram_tokenizer([" ".join(r.values()) for r in records])
    if family == "mistral":
        tok = mistral_sentencepiece()
        if tok is None:
            raise ValueError("mistral: run python scripts/fetch_sentencepiece_tokenizer.py")
        return tok
    tok = gpt2(workdir / family, **({"add_prefix_space": True} if family == "gpt2_prefix_space" else {}))
    if tok is None:
        raise ValueError(f"{family}: {SHARED_DATA}/tokenizers/gpt2 not found (set LLMSYS_DATA_DIR)")
    return tok


CATEGORIES = ("identical", "seam_merge", "mask_shift", "trl_double_eos", "truncation", "unexplained")


def t5_unigram_tokenizer(texts: list[str], vocab_size: int = 4000):
    """transformers' T5Tokenizer (T5's rules: whitespace split, "▁" before every word, ``</s>`` appended, no BOS)
    over a Unigram vocabulary trained on `texts`: no PyPI package ships T5's own ``spiece.model``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import T5Tokenizer

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace()])
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False
    )
    tok.train_from_iterator(texts, trainer=trainer)
    vocab = json.loads(tok.to_str())["model"]["vocab"]
    return T5Tokenizer(vocab=[tuple(v) for v in vocab], extra_ids=0)


def _tiny_causal_lm(tokenizer):
    """A 1-layer Llama for `tokenizer`'s vocabulary: SFTTrainer needs a model; the masks do not depend on it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def trl_examples(records: list[dict], tokenizer, template, max_length: int | None) -> list[dict | None]:
    """TRL SFTTrainer's prepared (input_ids, labels) per record, None where TRL dropped the record."""
    from datasets import Dataset
    from trl import SFTTrainer

    with tempfile.TemporaryDirectory() as out, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = SFTTrainer(
            model=_tiny_causal_lm(tokenizer),
            args=trl_config(out, max_length),
            train_dataset=Dataset.from_dict(trl_rows(records, template)),
            processing_class=tokenizer,
        )
        prepared = trainer.train_dataset
    rows: list[dict | None] = [None] * len(records)
    for index, ids, labels in zip(prepared["record_index"], prepared["input_ids"], prepared["labels"], strict=True):
        rows[index] = {"input_ids": list(ids), "labels": list(labels)}
    return rows


def our_examples(records: list[dict], tokenizer, template, max_length: int) -> list[dict | None]:
    """Our SFTExampleEncoder's (input_ids, labels) per record, None where we dropped it."""
    if isinstance(template, ConversationTemplate):  # --template chat: the conversation labeller
        return ConversationEncoder(tokenizer, template, max_length).encode_batch(records)[0]
    examples, _events = SFTExampleEncoder(tokenizer, template, max_length).encode_batch(records)
    return examples


def _first_supervised(labels: list[int]) -> int:
    return next((i for i, t in enumerate(labels) if t != IGNORE_INDEX), len(labels))


def _seam_merge(ours: dict, trl: dict, tokenizer) -> bool:
    """Same text, ids first differing at our prompt/response seam (where TRL's joint tokenization merged)."""
    a, b = ours["input_ids"], trl["input_ids"]
    if a == b or tokenizer.decode(a) != tokenizer.decode(b):
        return False
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    seam = _first_supervised(ours["labels"])
    return seam - 1 <= first <= seam


def _mask_shift(ours: dict, trl: dict, tokenizer) -> bool:
    """Same ids; the masks differ only in whitespace tokens adjacent to the boundary."""
    if ours["input_ids"] != trl["input_ids"]:
        return False
    differ = [i for i, (x, y) in enumerate(zip(ours["labels"], trl["labels"], strict=True)) if x != y]
    lo, hi = sorted((_first_supervised(ours["labels"]), _first_supervised(trl["labels"])))
    inside = all(lo <= i < hi for i in differ) and len(differ) == hi - lo
    return inside and tokenizer.decode(ours["input_ids"][lo:hi]).strip() == ""


def _double_eos(ours: dict, trl: dict, tokenizer) -> bool:
    """TRL's row is ours plus one more supervised EOS (EOS text appended and the post-processor's EOS)."""
    eos = tokenizer.eos_token_id
    return trl["input_ids"] == ours["input_ids"] + [eos] and trl["labels"] == ours["labels"] + [eos]


def _keep_start(full: dict | None, max_length: int) -> dict | None:
    """TRL's truncation of an untruncated row: the first max_length tokens, dropped when no label is left."""
    if full is None:
        return None
    cut = {k: v[:max_length] for k, v in full.items()}
    return cut if any(t != IGNORE_INDEX for t in cut["labels"]) else None


def classify(ours, trl, ours_full, trl_full, tokenizer, max_length: int) -> set[str]:
    """The explanations that hold for one record (see module doc); {"identical"} when both rows agree."""
    if ours == trl:
        return {"identical"}
    reasons = set()
    if ours_full != trl_full:
        if _seam_merge(ours_full, trl_full, tokenizer):
            reasons.add("seam_merge")
        elif _mask_shift(ours_full, trl_full, tokenizer):
            reasons.add("mask_shift")
        elif _double_eos(ours_full, trl_full, tokenizer):
            reasons.add("trl_double_eos")
        else:
            return {"unexplained"}
    if len(ours_full["input_ids"]) > max_length or len(trl_full["input_ids"]) > max_length:
        if trl != _keep_start(trl_full, max_length):
            return {"unexplained"}
        reasons.add("truncation")
    return reasons or {"unexplained"}


def compare_masks(records: list[dict], tokenizer, template, max_length: int, examples: int = 3) -> dict:
    """Counts of identical and explained rows over `records` (each record counted once per explanation)."""
    ours = our_examples(records, tokenizer, template, max_length)
    ours_full = our_examples(records, tokenizer, template, 1 << 30)
    trl = trl_examples(records, tokenizer, template, max_length)
    trl_full = trl_examples(records, tokenizer, template, None)
    counts, shown = Counter(), {}
    details = Counter()
    for index in range(len(records)):
        reasons = classify(ours[index], trl[index], ours_full[index], trl_full[index], tokenizer, max_length)
        counts.update(reasons)
        if "truncation" in reasons:
            details["trl_dropped"] += trl[index] is None
            details["ours_dropped"] += ours[index] is None
            details["trl_lost_eos"] += trl[index] is not None and tokenizer.eos_token_id not in trl[index]["labels"]
            details["ours_lost_eos"] += ours[index] is not None and tokenizer.eos_token_id not in ours[index]["labels"]
        if "seam_merge" in reasons:
            seam = _first_supervised(ours_full[index]["labels"])
            merged = trl_full[index]["input_ids"][seam - 1 : seam + 1]
            details["trl_straddling_token_supervised"] += _first_supervised(trl_full[index]["labels"]) <= seam
            shown.setdefault("seam_merge", []).append(repr(tokenizer.decode(merged)))
        for reason in reasons - {"identical"}:
            shown.setdefault(reason + "_records", []).append(index)
    return {
        "records": len(records),
        "max_length": max_length,
        "template": template.name,
        "tokenizer": type(tokenizer).__name__ + f"(vocab {len(tokenizer)})",
        "counts": {c: counts[c] for c in CATEGORIES},
        "details": dict(details),
        "examples": {k: v[:examples] for k, v in shown.items()},
    }


def trl_marked_tokenizer(tokenizer, family: str | None):
    """The tokenizer TRL's ``assistant_only_loss`` runs with: as is when TRL swaps in its own marked copy of this
    exact template (`get_training_chat_template`), else a copy holding the family's marked template."""
    from trl.chat_template_utils import get_training_chat_template

    if "{% generation %}" in tokenizer.chat_template:
        return tokenizer
    try:
        if get_training_chat_template(tokenizer) is not None:
            return tokenizer
    except ValueError:  # "not training-compatible ... patching is not supported for this template"
        pass
    if family is None or "marked" not in CHAT_FAMILIES[family]:
        raise ValueError(f"chat family {family}: TRL has no marked copy of this template and the family none")
    marked = copy.deepcopy(tokenizer)
    marked.chat_template = template_text(family, marked=True)
    return marked


def trl_conversation_examples(conversations: list[list[dict]], tokenizer) -> list[dict]:
    """TRL SFTTrainer's prepared (input_ids, labels) for a ``messages`` dataset with ``assistant_only_loss=True``
    (untruncated: ``max_length=None``)."""
    from datasets import Dataset
    from trl import SFTTrainer

    with tempfile.TemporaryDirectory() as out, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = SFTTrainer(
            model=_tiny_causal_lm(tokenizer), args=trl_config(out, None, assistant_only_loss=True),
            train_dataset=Dataset.from_dict({"messages": conversations}), processing_class=tokenizer,
        )  # fmt: skip
        prepared = trainer.train_dataset
    return [{"input_ids": list(i), "labels": list(lab)}
            for i, lab in zip(prepared["input_ids"], prepared["labels"], strict=True)]  # fmt: skip


def label_differences(ours: dict, trl: dict) -> list[list[int]]:
    """Runs of consecutive token indices whose label differs (the ids must agree)."""
    groups: list[list[int]] = []
    for i, (a, b) in enumerate(zip(ours["labels"], trl["labels"], strict=True)):
        if a != b:
            if groups and groups[-1][-1] == i - 1:
                groups[-1].append(i)
            else:
                groups.append([i])
    return groups


def whitespace_edge(ours: dict, trl: dict, tokenizer) -> bool:
    """Same ids; every run of differing labels decodes to whitespace and touches a token both sides supervise (a
    span edge: ChatML's newline after the generation prompt, say), so the two agree on every reply's text."""
    if ours["input_ids"] != trl["input_ids"]:
        return False
    both = [a != IGNORE_INDEX and b != IGNORE_INDEX for a, b in zip(ours["labels"], trl["labels"], strict=True)]
    for group in label_differences(ours, trl):
        if tokenizer.decode([ours["input_ids"][i] for i in group]).strip():
            return False
        lo, hi = group[0] - 1, group[-1] + 1
        if not ((lo >= 0 and both[lo]) or (hi < len(both) and both[hi])):
            return False
    return True


def fixture_conversations() -> list[dict]:
    """The hand-written multi-turn fixture (messages and ShareGPT spellings, system turns, 1-3 assistant turns,
    replies starting with a newline or spaces, code blocks), read and normalised by our loader."""
    from hf_llmsys.data.conversation_records import load_sft_records

    return load_sft_records(CONVERSATION_FIXTURE)[0]


def alpaca_conversations(records: list[dict], n: int, seed: int = 0) -> list[dict]:
    """`n` multi-turn conversations of consecutive Alpaca records (real texts and their whitespace): 1-4 exchanges,
    a system turn in every third, every other one spelled ShareGPT (normalised by our loader, as a user's file)."""
    import random

    from hf_llmsys.data.conversation_records import check_conversations
    from hf_llmsys.data.prompt_templates import alpaca_messages

    rng, raw, at = random.Random(seed), [], 0
    for index in range(n):
        turns = [] if index % 3 else [{"role": "system", "content": "You are a helpful assistant."}]
        for record in records[at : at + rng.randint(1, 4)]:
            turns += alpaca_messages(record)
        at = (at + len(turns)) % max(1, len(records) - 4)
        if index % 2:
            names = {"system": "system", "user": "human", "assistant": "gpt"}
            raw.append({"conversations": [{"from": names[t["role"]], "value": t["content"]} for t in turns]})
        else:
            raw.append({"messages": turns})
    return check_conversations(raw, "alpaca conversations")[0]


def renderable(conversations: list[dict], tokenizer) -> tuple[list[dict], int]:
    """(conversations the template renders, how many it refuses: Mistral's raises on a system turn, on both sides)."""
    kept = []
    for record in conversations:
        try:
            tokenizer.apply_chat_template(record["messages"], tokenize=False)
        except Exception:  # the template's own raise_exception
            continue
        kept.append(record)
    return kept, len(conversations) - len(kept)


def compare_conversations(conversations: list[dict], tokenizer, family: str | None, examples: int = 3) -> dict:
    """Our conversation labeller (the untagged template) against TRL's ``assistant_only_loss`` (a marked copy)."""
    conversations, refused = renderable(conversations, tokenizer)
    encoder = ConversationEncoder(tokenizer, ConversationTemplate(tokenizer), 1 << 30)
    ours = encoder.encode_batch(conversations)[0]
    trl = trl_conversation_examples([r["messages"] for r in conversations], trl_marked_tokenizer(tokenizer, family))
    counts, details, shown = Counter(), Counter(), {}
    for index, (o, t) in enumerate(zip(ours, trl, strict=True)):
        reason = "identical" if o == t else "whitespace_edge" if whitespace_edge(o, t, tokenizer) else "unexplained"
        counts[reason] += 1
        replies = sum(m["role"] == "assistant" for m in conversations[index]["messages"])
        details[f"with_{min(replies, 3)}{'+' if replies >= 3 else ''}_assistant_turns"] += 1
        if reason == "whitespace_edge":
            for group in label_differences(o, t):
                side = "ours" if o["labels"][group[0]] != IGNORE_INDEX else "trl"
                details[f"whitespace_tokens_only_{side}_supervises"] += len(group)
                text = repr(tokenizer.decode([o["input_ids"][i] for i in group]))
                shown.setdefault(f"whitespace_only_{side}", [])
                if text not in shown[f"whitespace_only_{side}"]:
                    shown[f"whitespace_only_{side}"].append(text)
        if reason != "identical":
            shown.setdefault(reason + "_records", []).append(index)
    return {"conversations": len(conversations), "refused_by_template": refused,
            "counts": {c: counts[c] for c in CONVERSATION_CATEGORIES}, "details": dict(sorted(details.items())),
            "examples": {k: v[:examples] for k, v in shown.items()}}  # fmt: skip
