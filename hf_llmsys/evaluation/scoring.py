"""Running a model to score tokens: device, eval mode, logits from any output, float32 per-token NLL, progress.

Shared by corpus, seq2seq and IFD perplexity. Shapes: B rows, S positions, V vocabulary, N scored tokens.
"""

from __future__ import annotations

import contextlib
import sys

import torch
from torch import nn
from torch.nn import functional as F

IGNORE_INDEX = -100


def model_device(model: nn.Module) -> torch.device:
    """Device of the model's first parameter (CPU for parameter-free modules)."""
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


@contextlib.contextmanager
def eval_mode(model: nn.Module):
    """model.eval() and inference mode inside; the model's previous training flag is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was_training)


def output_logits(output) -> torch.Tensor:
    """Logits (B, S, V) from a ModelOutput, a tuple whose first item is the logits, or a bare tensor."""
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    return logits if logits is not None else output[0]


def token_nlls_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """float32 NLL (N,) of every label != -100, row-major; logits (B, S, V) are aligned with labels (B, S)."""
    scored = labels != IGNORE_INDEX
    picked = logits[scored.to(logits.device)].float()  # (N, V)
    return F.cross_entropy(picked, labels[scored].to(logits.device), reduction="none")


def progress(iterable, total: int, show: bool | None, desc: str):
    """tqdm over batches when `show` (default: more than 8 batches and stderr is a terminal)."""
    if show is None:
        show = total > 8 and sys.stderr.isatty()
    if not show:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, unit="batch")


class GrowingProgress:
    """One tqdm bar over the batches of a streamed corpus, its total growing as each group is planned (one group:
    exactly ``progress``). Shown when `show`; by default when stderr is a terminal and the first group has more
    than 8 batches."""

    def __init__(self, show: bool | None, desc: str):
        self.show, self.desc, self.bar = show, desc, None

    def add(self, batches: int) -> None:
        """Count the batches of the next group into the total."""
        if self.show is None:
            self.show = batches > 8 and sys.stderr.isatty()
        if not self.show:
            return
        if self.bar is None:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=batches, desc=self.desc, unit="batch")
        else:
            self.bar.total += batches
            self.bar.refresh()

    def update(self) -> None:
        """One batch done."""
        if self.bar is not None:
            self.bar.update()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


__all__ = [
    "GrowingProgress",
    "IGNORE_INDEX",
    "eval_mode",
    "model_device",
    "output_logits",
    "progress",
    "token_nlls_from_logits",
]
