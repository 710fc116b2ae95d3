"""What ``llmsys demo`` prints on its console: the server's address, the zoo's one progress line
(``ZooManager._print_progress``) and real errors; nothing else.

``quiet_libraries`` turns off, while the demo runs, what the libraries would print around it: transformers' and
huggingface_hub's progress bars ("Loading weights", "Writing model shards") and warnings (the tokenizer's "indexing
errors" note on a long corpus, "a model of type llama" when SmolLM2's Llama folder is read into our class),
datasets' Map bars, and the zoo's per-run result lines (INFO records of ``hf_llmsys.experiments``). Expected states
of the page ("the zoo is not ready yet") are ``gr.Error(print_exception=False)``: a message, no traceback.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

QUIET_LOGGERS = ("hf_llmsys.experiments",)
_lock = threading.Lock()
_depth = 0  # nested / concurrent quiet blocks (the zoo's training thread, the page's loads): the last one restores
_saved: tuple | None = None


@contextmanager
def quiet_libraries() -> Iterator[None]:
    """Library progress bars and warnings off for the block; each switch restored when the last block ends."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = _silence()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _restore(_saved)


def _silence() -> tuple:
    import datasets
    import huggingface_hub.utils as hub_utils
    from transformers.utils import logging as hf_logging

    saved = (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled(),
             datasets.logging.get_verbosity(), datasets.is_progress_bar_enabled(),
             hub_utils.are_progress_bars_disabled(),
             [logging.getLogger(name).level for name in QUIET_LOGGERS])  # fmt: skip
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    datasets.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    hub_utils.disable_progress_bars()
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    return saved


def _restore(saved: tuple) -> None:
    import datasets
    import huggingface_hub.utils as hub_utils
    from transformers.utils import logging as hf_logging

    verbosity, bars, datasets_verbosity, datasets_bars, hub_off, levels = saved
    hf_logging.set_verbosity(verbosity)
    datasets.logging.set_verbosity(datasets_verbosity)
    if bars:
        hf_logging.enable_progress_bar()
    if datasets_bars:
        datasets.enable_progress_bars()
    if not hub_off:
        hub_utils.enable_progress_bars()
    for name, level in zip(QUIET_LOGGERS, levels, strict=True):
        logging.getLogger(name).setLevel(level)
