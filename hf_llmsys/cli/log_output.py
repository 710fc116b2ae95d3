"""What an `llmsys` command shows of the library's log records, and at which level.

Library modules never `print`: they log through ``transformers.utils.logging.get_logger(__name__)`` (plain
`logging` loggers under ``"hf_llmsys"``; transformers' own records stay under ``"transformers"``). What a command
reports to its user (a summary, a path it wrote) is printed on stdout by the command's entry point.

A command runs inside `command_logging()`: the ``hf_llmsys`` records of INFO and above go to stderr as plain lines
(warnings prefixed ``warning:``) for the length of the command, then the handler and level are restored, so the
Python API (``hf_llmsys.training.sft(...)``) follows the application's own logging configuration. A training job
then applies the Trainer's ``--log_level`` / ``--log_level_replica`` to the ``hf_llmsys`` logger as the Trainer
applies them to transformers' (`follow_trainer_log_level`): under torchrun only the main process shows INFO lines
by default.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from transformers.utils import logging as hf_logging

LIBRARY_LOGGER = "hf_llmsys"


class CommandFormatter(logging.Formatter):
    """INFO records as their message; warnings and errors prefixed with their level (``warning: ...``)."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        return message if record.levelno < logging.WARNING else f"{record.levelname.lower()}: {message}"


@contextmanager
def command_logging(stream=None) -> Iterator[logging.Handler]:
    """Show the library's INFO+ records on `stream` (default: the current sys.stderr) while the block runs."""
    logger = logging.getLogger(LIBRARY_LOGGER)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(CommandFormatter("%(message)s"))
    saved_level = logger.level
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved_level)


def follow_trainer_log_level(training_args) -> int:
    """Set the ``hf_llmsys`` logger to this process's `--log_level` (main) or `--log_level_replica` (others).

    ``passive`` (the Trainer's default) leaves the main process at INFO, the level `command_logging` shows.
    Returns the level set.
    """
    if training_args.should_log:
        name = training_args.log_level
        level = logging.INFO if name == "passive" else hf_logging.get_log_levels_dict()[name]
    else:
        name = training_args.log_level_replica
        level = logging.WARNING if name == "passive" else hf_logging.get_log_levels_dict()[name]
    logging.getLogger(LIBRARY_LOGGER).setLevel(level)
    return level
