"""Token ids into embeddings, with the user's mistakes named: an empty prompt, an id outside the vocabulary.

Shared by the decoder stack (llmsys_llama, llmsys_gpt3) and the T5 stacks. The happy path costs nothing extra:
the vocabulary bound is only inspected when ``nn.Embedding`` has already refused an index (on CPU an IndexError
"index out of range in self", which names neither the argument nor the bound).
"""

from __future__ import annotations

import torch
from torch import nn


def embed_token_ids(embed_tokens: nn.Embedding, input_ids: torch.Tensor) -> torch.Tensor:
    """(B, S) token ids -> (B, S, hidden) embeddings; ValueError naming input_ids for empty or out-of-vocab ids."""
    if input_ids.ndim >= 1 and input_ids.shape[-1] == 0:
        raise ValueError(
            f"input_ids is empty (shape {tuple(input_ids.shape)}): give at least one token, e.g. the tokenizer's "
            "bos_token_id as the prompt."
        )
    try:
        return embed_tokens(input_ids)
    except IndexError:
        vocab_size = embed_tokens.num_embeddings
        bad = input_ids[(input_ids < 0) | (input_ids >= vocab_size)]
        if bad.numel() == 0:
            raise
        raise ValueError(
            f"input_ids holds token id {int(bad.flatten()[0])} outside [0, vocab_size={vocab_size}): the tokenizer "
            "and the model disagree on the vocabulary (use the model's own tokenizer, or resize_token_embeddings)."
        ) from None
