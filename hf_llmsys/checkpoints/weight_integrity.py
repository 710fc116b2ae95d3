"""Integrity of a saved model folder: cheap checks on every load, the full sha256 on demand.

A save writes two manifests beside the weight files (``*.safetensors``, ``*.bin``), one line per file:

- ``checksums.sha256``: ``<hex sha256>  <file name>`` (``sha256sum -c checksums.sha256`` reads it);
- ``checksums.sizes``: ``<bytes>  <file name>``.

Every local ``from_pretrained`` runs `check_folder`: each listed file's size against ``checksums.sizes`` and each
safetensors file's header (it parses and the tensors it describes end exactly at the end of the file: a truncated
or appended file is named). That reads a few KB per file, so loading costs what transformers' costs. Hashing every
byte (tens of seconds for a 7B checkpoint) is `verify_folder`: ``llmsys verify DIR``,
``llmsys pull`` after the download, or on load with ``from_pretrained(..., verify_checksums=True)`` or
``LLMSYS_VERIFY_CHECKSUMS=1``. A flipped bit that keeps the size is therefore caught by the full check only.

A file changed after the save (a bad copy, or a deliberate edit such as removing tensors) is refused by a strict
load with an error naming it and ``llmsys verify``; a lenient load (``strict=False``, ``output_loading_info=True``)
warns and goes on, so an edited checkpoint stays loadable. ``llmsys verify DIR --update`` records the files as
they are now (accepting a deliberate edit). Folders without manifests (transformers' saves) get the header check.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

from transformers.utils import logging

logger = logging.get_logger(__name__)

CHECKSUM_FILE = "checksums.sha256"
SIZES_FILE = "checksums.sizes"
WEIGHT_SUFFIXES = (".safetensors", ".bin")
VERIFY_ENV = "LLMSYS_VERIFY_CHECKSUMS"


class AlteredWeightsError(ValueError):
    """A weight file differs from what the save recorded (size, header or sha256)."""


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 16 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def weight_files(folder: Path) -> list[str]:
    """Names of the weight files directly in `folder`, sorted."""
    return sorted(p.name for p in folder.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))


def write_manifests(folder: Path) -> None:
    """Write ``checksums.sha256`` and ``checksums.sizes`` for the weight files of `folder` (none: nothing)."""
    names = weight_files(folder)
    for manifest in (CHECKSUM_FILE, SIZES_FILE):
        (folder / manifest).unlink(missing_ok=True)
    if names:
        (folder / CHECKSUM_FILE).write_text("".join(f"{file_sha256(folder / n)}  {n}\n" for n in names))
        (folder / SIZES_FILE).write_text("".join(f"{(folder / n).stat().st_size}  {n}\n" for n in names))


def read_manifest(path: Path) -> dict[str, str]:
    """file name -> recorded value (digest or size) of a ``<value>  <name>`` manifest; {} when absent."""
    if not path.is_file():
        return {}
    entries = {}
    for line in path.read_text().splitlines():
        value, _, name = line.partition("  ")
        if name:
            entries[name] = value
    return entries


def safetensors_header_problem(path: Path) -> str | None:
    """Why `path` is not a complete safetensors file (None if it is): the 8-byte length, the JSON header, and the
    data offsets of its tensors against the file size. Reads the header only."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            return f"{size} bytes, shorter than the 8-byte header length"
        (header_len,) = struct.unpack("<Q", prefix)
        if 8 + header_len > size:
            return f"its header claims {header_len} bytes but the file has {size}"
        try:
            header = json.loads(handle.read(header_len))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            return f"its header is not valid JSON ({err})"
    ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    expected = 8 + header_len + max(ends, default=0)
    if expected != size:
        return f"{size} bytes, but its header describes {expected}"
    return None


def check_folder(folder: Path, *, strict: bool = True, full: bool | None = None) -> None:
    """The on-load checks: sizes against ``checksums.sizes`` and safetensors headers; the sha256 too if `full`
    (default: the ``LLMSYS_VERIFY_CHECKSUMS`` env var). A broken header always raises; a file that differs from
    the manifests raises `AlteredWeightsError` when `strict`, else logs a warning and the load goes on."""
    full = os.environ.get(VERIFY_ENV, "").lower() in ("1", "true", "yes") if full is None else full
    for path in sorted(folder.glob("*.safetensors")):
        problem = safetensors_header_problem(path)
        if problem:
            raise ValueError(f"{path}: not a complete safetensors file ({problem}); copy or download it again.")
    problems = verify_folder(folder) if full else size_problems(folder)
    if not problems:
        return
    message = (
        "; ".join(problems) + f". The file changed after saving: run `llmsys verify {folder}` to check every file; "
        f"load it anyway with strict=False, or accept the files as they are with `llmsys verify {folder} --update`."
    )
    if strict:
        raise AlteredWeightsError(message)
    logger.warning(message)


def size_problems(folder: Path) -> list[str]:
    """One line per weight file whose size differs from ``checksums.sizes``."""
    problems = []
    for name, recorded in read_manifest(folder / SIZES_FILE).items():
        path = folder / name
        if path.is_file() and str(path.stat().st_size) != recorded:
            problems.append(f"{path}: {path.stat().st_size} bytes, {recorded} recorded at save time in {SIZES_FILE}")
    return problems


def verify_folder(folder: Path) -> list[str]:
    """The full check: sizes, and every listed file's sha256 against ``checksums.sha256``; one line per problem
    (a listed file that is missing included). [] when all match or there is no manifest."""
    problems = size_problems(folder)
    for name, expected in read_manifest(folder / CHECKSUM_FILE).items():
        path = folder / name
        if any(line.startswith(f"{path}:") for line in problems):
            continue  # its size already differs
        if not path.is_file():
            problems.append(f"{path}: listed in {CHECKSUM_FILE} but missing")
        elif file_sha256(path) != expected:
            problems.append(f"{path}: its sha256 differs from the one recorded at save time in {CHECKSUM_FILE}")
    return problems


def _check(folder: Path, strict: bool, full: bool | None) -> None:
    check_folder(folder, strict=strict, full=full)


def install() -> None:
    """Have every hf-llmsys model write the manifests when it saves and check them when a local folder loads
    (``atomic_saving.SAVE_STEPS`` / ``strict_loading.FOLDER_CHECKS``; idempotent). Run by ``import hf_llmsys``."""
    from .atomic_saving import SAVE_STEPS
    from .strict_loading import FOLDER_CHECKS

    if write_manifests not in SAVE_STEPS:
        SAVE_STEPS.append(write_manifests)
    if _check not in FOLDER_CHECKS:
        FOLDER_CHECKS.append(_check)
