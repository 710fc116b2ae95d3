"""One reply, streamed: ``model.generate`` in a thread feeding a ``TextIteratorStreamer``, read as text pieces.

transformers' pattern (``TextIteratorStreamer`` docs): generate runs in a worker thread and puts decoded text in a
queue (``skip_prompt=True``: only the new tokens; special tokens skipped, so the end-of-turn token never shows);
the caller iterates the streamer. Added here:

- stopping: `ReplyStream.stop()` (the terminal calls it on Ctrl-C) sets an event that a ``StoppingCriteria``
  reads before each new token, so the worker ends within one decoding step and the thread is joined;
- errors: an exception inside generate ends the stream and is raised again in the reading thread (a bare
  streamer would wait forever);
- the settings: ``temperature`` None keeps the model's generation_config (greedy unless it samples), 0 is greedy,
  > 0 samples with it (``top_p`` too); ``max_new_tokens`` is cut so a decoder's prompt + reply stays within its
  positions (`evaluation.greedy_answers.new_token_budget`); generation stops at ``stop_ids``.

The pieces joined are the new tokens decoded with ``skip_special_tokens=True`` (the streamer holds text back only
until a word is complete, and flushes it at the end).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

from ..evaluation.greedy_answers import new_token_budget


@dataclass(frozen=True)
class Sampling:
    """How to pick tokens: ``temperature`` None = the model's generation_config, 0 = greedy, > 0 = sampling."""

    max_new_tokens: int = 512
    temperature: float | None = None
    top_p: float | None = None

    def generate_kwargs(self) -> dict:
        """The sampling arguments of ``generate`` (nothing for the model's own settings)."""
        if self.temperature is None:
            return {} if self.top_p is None else {"top_p": self.top_p}
        if self.temperature == 0:
            return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
        return {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p if self.top_p else 1.0}


class _StopFlag(StoppingCriteria):
    """Ends generation once `event` is set (checked after every new token)."""

    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, input_ids, scores, **kwargs) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


class ReplyStream:
    """Iterate to get the reply's text pieces as they are generated; `stop()` ends it early."""

    def __init__(self, model, tokenizer, prompt_ids: list[int], sampling: Sampling, stop_ids: list[int]):
        self.streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
        self._stop = threading.Event()
        self._error: BaseException | None = None
        device = next(model.parameters()).device
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (stop_ids or [None])[0]
        self._kwargs = {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "max_new_tokens": new_token_budget(model, len(prompt_ids), sampling.max_new_tokens, False),
            "eos_token_id": list(stop_ids) or None,
            "pad_token_id": pad_id,
            "streamer": self.streamer,
            "stopping_criteria": StoppingCriteriaList([_StopFlag(self._stop)]),
            **sampling.generate_kwargs(),
        }
        self._thread = threading.Thread(target=self._generate, args=(model,), daemon=True)
        self._thread.start()

    def _generate(self, model) -> None:
        try:
            with torch.inference_mode():
                model.generate(**self._kwargs)
        except BaseException as err:  # re-raised by the reader; the stream must end either way
            self._error = err
            self.streamer.on_finalized_text("", stream_end=True)

    def __iter__(self):
        yield from self.streamer
        self._thread.join()
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        """End the reply after the current token and wait for the worker."""
        self._stop.set()
        self._thread.join()
