"""Fused weights as views of the memory-mapped checkpoint instead of copies (q/k/v -> ``qkv_proj``, gate/up ->
``gate_up_proj``, T5's k/v -> ``kv_proj``).

transformers' loader memory-maps each safetensors file and hands every tensor over as a view of that mapping, so
its Llama reads no weight bytes at load time: the first forward pages them in. Our fused projections joined their
pieces with ``torch.cat`` instead, and most of that copy's time (about 0.1 s per 280 MB here) is the first touch
of fresh anonymous pages, not the copy itself. When the pieces lie back to back in the file, in fusion order,
the fused tensor is already on disk: one row range of the file. Two halves:

- saving (`write_in_fusion_order`): a safetensors file is rewritten so that each fused tensor's pieces are
  adjacent, in the order the fusion joins them. The format lets the data section be in any order (its rule: the
  tensors tile it with no gap and no overlap); safetensors' own writer sorts by dtype, then name, which already
  puts ``gate_proj`` just before ``up_proj`` but ``o_proj`` between ``k_proj`` and ``q_proj``. Every reader looks
  tensors up through the header, so keys, shapes and bytes are unchanged: transformers' Llama, our loader or any
  safetensors reader read the file as before.
- loading (`FileViews`, active while ``from_pretrained`` converts the checkpoint; ``ConcatenateRows`` asks it
  first): the pieces of one fused tensor are views of safetensors' mapping of a checkpoint file. Their file and
  offsets come from ``/proc/self/maps`` (read once per load; the mapping is matched to the checkpoint files by
  device and inode, not by name), the file's header must name exactly these tensors back to back (dtype, shape),
  and the fused tensor becomes one view of a private, copy-on-write mapping of the same file, with a storage of
  its own bytes only (``torch.save`` and ``deepcopy`` copy the tensor, not the file). Writing to it (training)
  copies the touched pages, as for transformers' own memory-mapped weights. Anything else falls back to the
  copy: another OS, a dtype cast or device move at load, pieces in different shards or not adjacent, a file
  replaced since it was opened.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import torch

# safetensors dtype names -> torch dtypes (the ones a weight can have; others never form views)
SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
HEADER_ALIGNMENT = 8  # safetensors pads its JSON header with spaces to a multiple of 8 bytes
METADATA_KEY = "__metadata__"


def read_header(path: str | os.PathLike) -> tuple[int, dict]:
    """(offset of the data section, the parsed JSON header) of a safetensors file."""
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        return 8 + length, json.loads(handle.read(length))


# ---------------------------------------------------------------------------------------------------- saving


def fusion_order(keys: Sequence[str], groups: Iterable[Sequence[str]]) -> list[str]:
    """`keys` (in file order) with each group's members moved next to each other, in group order, at the place of
    the group's first member in the file. Groups with a key missing from `keys` are left alone."""
    position = {key: index for index, key in enumerate(keys)}
    leader: dict[str, tuple[int, int]] = {}  # member -> (position of its group's first member, rank in group)
    for group in groups:
        if len(group) > 1 and all(key in position for key in group):
            first = min(position[key] for key in group)
            leader.update({key: (first, rank) for rank, key in enumerate(group)})
    return sorted(keys, key=lambda key: leader.get(key, (position[key], 0)))


def write_in_fusion_order(path: Path, groups: Iterable[Sequence[str]]) -> bool:
    """Rewrite the safetensors file `path` with each group's tensors adjacent in group order (see `fusion_order`).
    Members of a group must share a dtype (a group that does not is left alone, so every tensor keeps its
    alignment). Returns whether the file changed.

    Only the byte ranges whose tensors move are rewritten, in place (for a Llama layer, its k/o/q/v weights:
    about a quarter of the file), when the new header fits in the old one's bytes (padded with spaces, as
    safetensors pads it); otherwise the whole file is copied into a temporary one that replaces it. A save calls
    this on its staging folder, before the folder is moved into place, so a crash part-way loses nothing."""
    data_start, header = read_header(path)
    entries = {key: value for key, value in header.items() if key != METADATA_KEY}
    keys = sorted(entries, key=lambda key: entries[key]["data_offsets"][0])
    groups = [group for group in groups if len({entries.get(key, {}).get("dtype") for key in group}) == 1]
    order = fusion_order(keys, groups)
    if order == keys:
        return False
    new_header: dict = {METADATA_KEY: header[METADATA_KEY]} if METADATA_KEY in header else {}
    offset = 0
    for key in order:
        start, end = entries[key]["data_offsets"]
        new_header[key] = {**entries[key], "data_offsets": [offset, offset + end - start]}
        offset += end - start
    encoded = json.dumps(new_header, separators=(",", ":")).encode()
    if 8 + len(encoded) <= data_start:
        permute_in_place(path, keys, order, entries, encoded + b" " * (data_start - 8 - len(encoded)))
    else:
        copy_in_order(path, order, entries, data_start, encoded + b" " * (-len(encoded) % HEADER_ALIGNMENT))
    return True


def permute_in_place(path: Path, keys: list[str], order: list[str], entries: dict, header: bytes) -> None:
    """Write `header` (same length as the old one) and move the tensors from `keys`' order into `order`,
    rewriting only the runs of the data section whose tensors change places (each run read whole, then written
    back permuted)."""
    data_start = 8 + len(header)
    with open(path, "r+b") as handle:
        (old_length,) = struct.unpack("<Q", handle.read(8))
        if old_length != len(header):
            raise ValueError(f"{path}: the new header has {len(header)} bytes, the old one {old_length}")
        handle.seek(0)
        handle.write(struct.pack("<Q", len(header)) + header)
        run_start, old_seen, new_seen = 0, set(), set()
        for index, (old_key, new_key) in enumerate(zip(keys, order, strict=True)):
            old_seen.add(old_key)
            new_seen.add(new_key)
            if old_seen != new_seen:
                continue
            if order[run_start : index + 1] != keys[run_start : index + 1]:  # a run closed: the same tensors, moved
                begin = entries[keys[run_start]]["data_offsets"][0]
                handle.seek(data_start + begin)
                block = handle.read(entries[keys[index]]["data_offsets"][1] - begin)
                handle.seek(data_start + begin)
                for key in order[run_start : index + 1]:
                    start, end = entries[key]["data_offsets"]
                    handle.write(block[start - begin : end - begin])
            run_start, old_seen, new_seen = index + 1, set(), set()


def copy_in_order(path: Path, order: list[str], entries: dict, data_start: int, header: bytes) -> None:
    """Write a new file with `header` and the tensors in `order` (copied from `path`), then rename it over
    `path`."""
    temporary = path.with_name(f".{path.name}.reordering")
    try:
        with open(path, "rb") as source, open(temporary, "wb") as target:
            target.write(struct.pack("<Q", len(header)) + header)
            target.flush()
            for key in order:
                start, end = entries[key]["data_offsets"]
                copy_range(source, target, data_start + start, end - start)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


COPY_BLOCK_BYTES = 1 << 24  # the buffered fallback's read size


def copy_range(source, target, offset: int, count: int) -> None:
    """Append `count` bytes of `source` from `offset` to `target` (both open files): in the kernel where it can
    (``copy_file_range``), else through a buffer."""
    while count:
        try:
            copied = os.copy_file_range(source.fileno(), target.fileno(), count, offset)
        except (AttributeError, OSError):  # no such call (not Linux), or not between these filesystems
            copied = 0
        if not copied:
            source.seek(offset)
            block = source.read(min(count, COPY_BLOCK_BYTES))
            target.seek(0, os.SEEK_END)
            target.write(block)
            target.flush()  # the next copy_file_range writes at the descriptor's offset: the block must be there
            copied = len(block)
            if not copied:
                raise OSError(f"{source.name}: ends before byte {offset + count}")
        offset, count = offset + copied, count - copied
    target.seek(0, os.SEEK_END)


# --------------------------------------------------------------------------------------------------- loading


def map_privately(path: str, nbytes: int) -> torch.UntypedStorage:
    """A copy-on-write memory mapping of the file's first `nbytes` (``mmap(MAP_PRIVATE)``: pages are read on
    first touch, and writes stay in this process)."""
    return torch.UntypedStorage.from_file(path, shared=False, nbytes=nbytes)


class MappedFile:
    """One checkpoint file: its identity, its header's tensors by data offset, and (once needed) our private
    mapping of it."""

    def __init__(self, path: Path):
        self.path = path
        with open(path, "rb") as handle:
            status = os.fstat(handle.fileno())
        self.identity = (status.st_dev, status.st_ino)
        self.data_start, header = read_header(path)
        self.by_offset = {
            entry["data_offsets"][0]: entry for key, entry in header.items() if key != METADATA_KEY
        }  # fmt: skip
        self.storage: torch.UntypedStorage | None = None

    def mapping(self) -> torch.UntypedStorage | None:
        """Our private (copy-on-write) mapping of the whole file, made once; None if the file at the path is no
        longer the one whose header was read (replaced since) or cannot be mapped (the load then copies)."""
        if self.storage is None:
            try:
                descriptor = os.open(self.path, os.O_RDONLY)
            except OSError:
                return None
            try:
                status = os.fstat(descriptor)
                if (status.st_dev, status.st_ino) != self.identity:
                    return None
                self.storage = map_privately(f"/proc/self/fd/{descriptor}", status.st_size)
            except (OSError, RuntimeError):  # a filesystem that refuses private mappings
                return None
            finally:
                os.close(descriptor)
        return self.storage


def lines_containing(text: bytes, needles: Iterable[bytes]) -> list[bytes]:
    """The distinct lines of `text` that contain one of `needles`, in order."""
    starts = set()
    for needle in needles:
        found = text.find(needle)
        while found >= 0:
            starts.add(text.rfind(b"\n", 0, found) + 1)
            found = text.find(needle, found + 1)
    return [text[start : (text.find(b"\n", start) + 1 or len(text) + 1) - 1] for start in sorted(starts)]


class FileViews:
    """Resolves the pieces of a fused tensor to one view of the checkpoint file (see the module docstring)."""

    MAPS = Path("/proc/self/maps")

    def __init__(self, files: Iterable[str | os.PathLike]):
        self.paths = [Path(name) for name in files if str(name).endswith(".safetensors")]
        self.regions: list[tuple[int, int, int, MappedFile]] | None = None  # (start, end, file offset, file)

    def find_regions(self) -> list[tuple[int, int, int, MappedFile]]:
        """The process's mappings of the checkpoint files (read once, at the first fused tensor of the load:
        safetensors has mapped every file by then and keeps the mappings until the load ends). A load with no
        fused tensor (GPT-2's fused ``c_attn``) reads neither this nor the files' headers."""
        files = []
        for path in self.paths:
            try:
                files.append(MappedFile(path))
            except (OSError, ValueError, struct.error):  # unreadable: the loader reports it, we only copy
                continue
        by_identity = {file.identity: file for file in files}
        inodes = {str(inode).encode() for _, inode in by_identity}
        regions = []
        try:
            text = self.MAPS.read_bytes()
        except OSError:
            return regions
        # "start-end perms offset major:minor inode path"; only the lines naming one of the inodes are parsed
        for line in lines_containing(text, inodes):
            fields = line.split(None, 5)
            if len(fields) < 6 or not fields[5].startswith(b"/"):
                continue
            major, _, minor = fields[3].partition(b":")
            identity = (os.makedev(int(major, 16), int(minor, 16)), int(fields[4]))
            if identity in by_identity:
                start, _, end = fields[0].partition(b"-")
                regions.append((int(start, 16), int(end, 16), int(fields[2], 16), by_identity[identity]))
        return regions

    def locate(self, tensor: torch.Tensor) -> tuple[MappedFile, int] | None:
        """(file, data-section offset) of a tensor that is a view of a mapping of one of the checkpoint files."""
        if self.regions is None:
            self.regions = self.find_regions()
        address = tensor.data_ptr()
        for start, end, file_offset, file in self.regions:
            if start <= address and address + tensor.nbytes <= end:
                return file, address - start + file_offset - file.data_start
        return None

    def joined(self, pieces: Sequence[torch.Tensor]) -> torch.Tensor | None:
        """``torch.cat(pieces)`` as a view of the file, or None where the pieces are not exactly consecutive
        tensors of one checkpoint file, as stored there."""
        first = pieces[0]
        if first.device.type != "cpu" or first.dim() == 0 or not all(
            piece.dtype == first.dtype and piece.shape[1:] == first.shape[1:] and piece.is_contiguous()
            and piece.device == first.device for piece in pieces
        ):  # fmt: skip
            return None
        located = self.locate(first)
        if located is None:
            return None
        file, start = located
        offset = start
        for piece in pieces:
            entry = file.by_offset.get(offset)
            if (
                entry is None
                or SAFETENSORS_DTYPES.get(entry["dtype"]) != piece.dtype
                or list(entry["shape"]) != list(piece.shape)
                or entry["data_offsets"][1] - offset != piece.nbytes
                or self.locate(piece) != (file, offset)
            ):
                return None
            offset += piece.nbytes
        mapping = file.mapping()
        if mapping is None:
            return None
        begin = file.data_start + start
        storage = mapping[begin : file.data_start + offset]  # keeps the mapping alive, sized to these bytes only
        rows = sum(piece.shape[0] for piece in pieces)
        view = torch.empty(0, dtype=first.dtype).set_(storage, 0, (rows, *first.shape[1:]))
        # every piece's place was checked against the header; one element read through both mappings guards
        # the step from safetensors' mapping to ours
        if not torch.equal(view.view(-1)[:1].view(torch.uint8), first.view(-1)[:1].view(torch.uint8)):
            return None
        return view


ACTIVE_FILE_VIEWS: ContextVar[FileViews | None] = ContextVar("llmsys_active_file_views", default=None)


@contextmanager
def file_views(checkpoint_files: Iterable[str | os.PathLike] | None):
    """While active, ``ConcatenateRows`` joins pieces of these checkpoint files as file views where it can."""
    token = ACTIVE_FILE_VIEWS.set(FileViews(checkpoint_files or []))
    try:
        yield
    finally:
        ACTIVE_FILE_VIEWS.reset(token)


def joined_as_file_view(pieces: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The pieces as one view of the active load's checkpoint file, or None (no active load, or not possible)."""
    views = ACTIVE_FILE_VIEWS.get()
    return None if views is None or not views.paths else views.joined(pieces)
