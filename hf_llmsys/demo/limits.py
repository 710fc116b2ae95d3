"""The demo's bounds on user input and work per request, checked before any model runs and shown in the page.

A request over a bound fails with ``LimitError`` (a ValueError) whose message names the bound and the value; the
app turns it into ``gr.Error`` so the page (and gradio_client) get that message, never a crash.
"""

from __future__ import annotations

from dataclasses import dataclass


class LimitError(ValueError):
    """A request exceeds one of the demo's limits."""


@dataclass(frozen=True)
class Limits:
    """Per-request bounds and the queue's concurrency and size."""

    max_chars: int = 4000
    max_tokens: int = 1024
    max_new_tokens: int = 64
    max_beams: int = 4
    max_length: int = 1024  # positional-encoding and sparse-layout plots
    max_heads: int = 16
    concurrency_limit: int = 2
    max_queue_size: int = 32

    def check_text(self, text: str | None, field: str = "text") -> str:
        """The pasted text if it is non-empty and within max_chars."""
        if not isinstance(text, str) or not text.strip():
            raise LimitError(f"{field}: paste some text first.")
        if len(text) > self.max_chars:
            raise LimitError(f"{field}: {len(text)} characters is over the limit of {self.max_chars} characters.")
        return text

    def check_tokens(self, n_tokens: int, field: str = "text") -> None:
        """Raise when a tokenized input is longer than max_tokens."""
        if n_tokens > self.max_tokens:
            raise LimitError(f"{field}: {n_tokens} tokens is over the limit of {self.max_tokens} tokens.")

    def check_int(self, value, field: str, low: int, high: int) -> int:
        """An integer in [low, high] (slider values arrive as floats from some clients)."""
        try:
            number = int(value)
        except (TypeError, ValueError) as error:
            raise LimitError(f"{field}: expected an integer, got {value!r}.") from error
        if number != value and not (isinstance(value, float) and value.is_integer()):
            raise LimitError(f"{field}: expected an integer, got {value!r}.")
        if not low <= number <= high:
            raise LimitError(f"{field}: {number} is outside the allowed range {low} .. {high}.")
        return number

    def markdown(self) -> str:
        """The limits as one line for the page."""
        return (f"Limits per request: {self.max_chars} characters and {self.max_tokens} tokens of text, "
                f"{self.max_new_tokens} new tokens, {self.max_beams} beams, lengths up to {self.max_length}, "
                f"{self.max_heads} heads; {self.concurrency_limit} requests run at once, "
                f"{self.max_queue_size} may wait.")  # fmt: skip
