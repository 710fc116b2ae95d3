"""A disk cache of tokenized, packed pre-training datasets (non-streaming `llmsys train`), so a rerun on the same
text with the same tokenizer and block size loads the blocks instead of tokenizing again.

The key is a sha256 of everything the blocks depend on: the tokenizer (its serialised `tokenizers` JSON and eos
id), the pieces' text and document ends, the block length, the packing kind and a format version. An entry is a
`Dataset.save_to_disk` folder (memory-mapped when loaded) written to a staging folder and renamed into place, so a
run killed while writing leaves no entry that could be read half-written.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from datasets import Dataset, load_from_disk
from transformers.utils import logging

logger = logging.get_logger(__name__)

# bumped when the blocks of the same text change: 2 = special strings in documents are plain text
# (pretrain_text.document_ids)
CACHE_FORMAT = "llmsys-pretrain-blocks-2"


def default_cache_dir() -> str:
    """``<HF_DATASETS_CACHE>/hf_llmsys_tokenized`` (HF_DATASETS_CACHE / HF_HOME move it, as for datasets)."""
    import datasets.config

    return os.path.join(str(datasets.config.HF_DATASETS_CACHE), "hf_llmsys_tokenized")


def tokenizer_fingerprint(tokenizer) -> str:
    """What the token ids depend on: the fast tokenizer's serialised model, pre-tokenizer and specials, and eos."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    body = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(f"{type(tokenizer).__name__}|{tokenizer.eos_token_id}|{body}".encode()).hexdigest()


def blocks_key(chunks: list[dict], tokenizer, block_length: int, kind: str) -> str:
    """The cache key of the blocks ``kind`` packing makes of ``chunks`` (see the module docstring)."""
    digest = hashlib.sha256(f"{CACHE_FORMAT}|{kind}|{block_length}|{tokenizer_fingerprint(tokenizer)}".encode())
    for chunk in chunks:
        digest.update(b"\x01" if chunk["end_of_document"] else b"\x00")
        digest.update(chunk["text"].encode("utf-8"))
        digest.update(b"\xff")  # UTF-8 never holds 0xff: chunk boundaries are part of the key
    return digest.hexdigest()[:32]


def cached_dataset(cache_dir: str | None, key: str, build: Callable[[], Dataset], what: str) -> Dataset:
    """``build()`` (saved under ``cache_dir/key``) or the saved copy; ``cache_dir=None`` disables the cache."""
    if cache_dir is None:
        return build()
    folder = Path(cache_dir) / key
    if (folder / "dataset_info.json").is_file():
        try:
            dataset = load_from_disk(str(folder))
        except Exception as err:  # an entry damaged on disk: rebuild it rather than fail the run
            logger.warning(f"{what}: the cached blocks in {folder} are unreadable ({err}); tokenizing again")
            shutil.rmtree(folder, ignore_errors=True)
        else:
            logger.info(f"{what}: tokenized blocks loaded from the cache {folder}")
            return dataset
    dataset = build()
    if len(dataset) == 0:  # nothing worth keeping (the caller reports the too-short split); load_from_disk refuses it
        return dataset
    staging = Path(cache_dir) / f".staging-{key}-{uuid.uuid4().hex[:8]}"
    try:
        dataset.save_to_disk(str(staging))
        os.replace(staging, folder)
    except OSError as err:  # another run wrote the same entry first, or the disk is full: the blocks are still good
        logger.warning(f"{what}: could not cache the tokenized blocks in {folder} ({err})")
        shutil.rmtree(staging, ignore_errors=True)
        return dataset
    logger.info(f"{what}: tokenized blocks cached in {folder}")
    return load_from_disk(str(folder))
