"""Resuming `llmsys train --streaming` at the saved position of the stream instead of replaying it.

Without this, the Trainer resumes an IterableDataset by ``skip_first_batches``: it re-reads, re-tokenizes and drops
every batch the checkpoint had already trained on (an honest replay, but a run resumed after a day of streaming
spends about a day reading). Here, as accelerate does for ``Accelerator.save_state``:

- the training DataLoader is torchdata's ``StatefulDataLoader`` (accelerate's ``use_stateful_dataloader``, turned
  on by `use_stateful_dataloader`); its ``state_dict()`` holds the `datasets.IterableDataset` state of the main
  process or of every dataloader worker (shard, offset inside it, the batched map's position, the repeat count),
  taken by accelerate just before the batch it yields, so its one-batch look-ahead is accounted for;
- `StreamPositionCallback.on_save` writes that state into the checkpoint folder, one file per rank
  (``stream_position-rank<R>.pt``, written to a temporary name and renamed, so a kill leaves none or a whole one);
- `resume_at_stream_position` (before ``trainer.train``): when the checkpoint holds this rank's file, the Trainer
  is told not to skip batches (``ignore_data_skip``) and the callback loads the state into the new DataLoader at
  ``on_train_begin``, so the first batch is the one after the checkpoint's last.

When the state cannot be taken (a dataset without ``state_dict``, such as accelerate's
``IterableDatasetShard`` under torchrun when there are fewer shards than ranks) no file is written and resuming
replays the stream as before: the same batches, only slower. tests/test_pretrain_streaming.py checks both: the
batches after resuming equal the uninterrupted run's, and the resumed run tokenizes only what it trains on.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback
from transformers.utils import logging

logger = logging.get_logger(__name__)

STATE_FILE = "stream_position-rank{rank}.pt"


def use_stateful_dataloader(trainer: Trainer) -> None:
    """Make the trainer's accelerator build StatefulDataLoaders (torchdata, a dependency) before
    ``get_train_dataloader`` runs."""
    trainer.accelerator.dataloader_config.use_stateful_dataloader = True


def state_file(checkpoint: str | os.PathLike, rank: int) -> Path:
    return Path(checkpoint) / STATE_FILE.format(rank=rank)


def dataset_is_stateful(dataloader) -> bool:
    """Whether the DataLoader's state covers its dataset: a StatefulDataLoader over a dataset with state_dict."""
    dataset = getattr(getattr(dataloader, "base_dataloader", dataloader), "dataset", None)
    return hasattr(dataloader, "state_dict") and callable(getattr(dataset, "state_dict", None))


class StreamPositionCallback(TrainerCallback):
    """Saves the training DataLoader's position with every checkpoint; loads ``resume_state`` when training begins."""

    def __init__(self):
        self.resume_state: dict | None = None

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        if self.resume_state is not None and train_dataloader is not None:
            train_dataloader.load_state_dict(self.resume_state)
            self.resume_state = None

    def on_save(self, args, state, control, train_dataloader=None, **kwargs):
        if train_dataloader is None or not dataset_is_stateful(train_dataloader):
            return
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        checkpoint.mkdir(parents=True, exist_ok=True)  # another node's rank 0 may have written it elsewhere
        target = state_file(checkpoint, args.process_index)
        partial = target.with_suffix(".partial")
        torch.save(train_dataloader.state_dict(), partial)
        os.replace(partial, target)


def resume_at_stream_position(trainer: Trainer, checkpoint: str | None) -> bool:
    """Before ``trainer.train(resume_from_checkpoint=checkpoint)``: resume at the stream position saved in the
    checkpoint when it holds one for this rank (True), else leave the Trainer's replay (False)."""
    callback = next((c for c in trainer.callback_handler.callbacks if isinstance(c, StreamPositionCallback)), None)
    if callback is None or not checkpoint:
        return False
    path = state_file(checkpoint, trainer.args.process_index)
    if not path.is_file():
        logger.info(f"{checkpoint} holds no stream position for rank {trainer.args.process_index}: replaying the "
                    "stream up to it")  # fmt: skip
        return False
    callback.resume_state = torch.load(path, weights_only=True)  # plain dicts, lists and numbers
    trainer.args.ignore_data_skip = True
    logger.info(f"resuming the stream at the position saved in {path.name}")
    return True


def streaming_trainer(trainer: Trainer) -> Trainer:
    """Equip a --streaming job's Trainer to save and restore its stream position (module docstring)."""
    use_stateful_dataloader(trainer)
    trainer.add_callback(StreamPositionCallback())
    return trainer
