"""Greedy answers of an instruction-tuned model for records, with the training template and prompt ids (the sft
and dpo jobs' summaries; `new_token_budget` also bounds `llmsys chat`'s replies).

`generate_responses` starts from each record's training prefix (`SFTExampleEncoder.generation_prefix`, or the
conversation encoder's: the ids before the first supervised token of the record's own training example, so
generation sees the training prompt to the token), generates greedily in left-padded batches (decoder-only) or right-padded encoder
batches (encoder-decoder), stops at EOS (and at a chat template's end-of-turn token), and decodes only the new
tokens (less the prompt characters that a first token straddling the seam covers, the prefix's ``overhang``).
`exact_match` compares answers with the records' outputs after stripping surrounding whitespace.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..data.conversation_labels import ConversationEncoder, ConversationTemplate
from ..data.sft_labels import SFTExampleEncoder


def _pad(rows: list[list[int]], pad_id: int, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention_mask) of shape (B, T), padded on the left or the right."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        span = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, span] = torch.tensor(row)
        mask[i, span] = 1
    return ids, mask


def new_token_budget(model, prompt_length: int, max_new_tokens: int, is_encoder_decoder: bool) -> int:
    """``max_new_tokens``, cut so that a decoder's prompt + answer stays within ``max_position_embeddings`` (at
    least 1): past it a learned position table has no entry and RoPE runs untrained positions."""
    context = getattr(model.config, "max_position_embeddings", None)
    if is_encoder_decoder or not isinstance(context, int):
        return max_new_tokens
    return max(1, min(max_new_tokens, context - prompt_length))


@torch.no_grad()
def generate_responses(
    model, tokenizer, template, records: Sequence[dict], max_new_tokens: int = 64, max_length: int = 512,
    batch_size: int = 16, encoder=None,
) -> list[str]:  # fmt: skip
    """Greedy answers (text of the new tokens, special tokens skipped) for `records` under `template`.

    `encoder`: the training job's example encoder (its `generation_prefix` gives the prompt ids); None builds one
    for `template` (`ConversationEncoder` for a chat template, else `SFTExampleEncoder`).
    """
    is_encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    if encoder is None and isinstance(template, ConversationTemplate):  # chat templates: the conversation path
        encoder = ConversationEncoder(tokenizer, template, max_length)
    elif encoder is None:
        encoder = SFTExampleEncoder(tokenizer, template, max_length, is_encoder_decoder=is_encoder_decoder)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    # a chat template's end-of-turn token ends the answer too (ChatML's <|im_end|> when the EOS is <|endoftext|>)
    stop_ids = template.stop_token_ids() if isinstance(template, ConversationTemplate) else tokenizer.eos_token_id
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    answers = []
    start = {"decoder_start_token_id": model.config.decoder_start_token_id} if is_encoder_decoder else {}
    for first in range(0, len(records), batch_size):
        prefixes = [encoder.generation_prefix(r) for r in records[first : first + batch_size]]
        prompts = [ids for ids, _ in prefixes]
        ids, mask = _pad(prompts, pad_id, left=not is_encoder_decoder)
        out = model.generate(
            **start,
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=new_token_budget(model, ids.shape[1], max_new_tokens, is_encoder_decoder),
            do_sample=False,
            num_beams=1,
            eos_token_id=stop_ids,
            pad_token_id=pad_id,
        )
        new = out if is_encoder_decoder else out[:, ids.shape[1] :]
        texts = tokenizer.batch_decode(new, skip_special_tokens=True)
        answers += [t[len(o) :] if o and t.startswith(o) else t for t, (_, o) in zip(texts, prefixes, strict=True)]
    model.train(was_training)
    return answers


def exact_match(answers: Sequence[str], records: Sequence[dict]) -> float:
    """Fraction of answers equal to the records' outputs (surrounding whitespace ignored)."""
    if not records:
        raise ValueError("exact_match needs at least one record")
    hits = sum(a.strip() == r["output"].strip() for a, r in zip(answers, records, strict=True))
    return hits / len(records)
