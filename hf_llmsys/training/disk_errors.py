"""A full or read-only disk while a job writes: one error naming the folder and the cause, the last model kept.

Checkpoints (the Trainer's torch.save / safetensors) and the final save can fail for lack of space late in a run;
the raw errors name neither the folder nor the cause in words a user acts on (torch.save says "[enforce fail at
inline_container.cc] unexpected pos"). Saves are staged and checkpoints are only used when complete, so what was
there before stays loadable; this turns the failure into a ValueError that says so (`llmsys` prints it as one line).
"""

from __future__ import annotations

import contextlib
import errno
import os

# What the libraries say when a write fails for lack of space or a read-only disk: OSError errnos, and the texts of
# safetensors' SafetensorError ("I/O error: No space left on device (os error 28)") and torch.save's RuntimeError
# ("[enforce fail at inline_container.cc] ... unexpected pos"), which carry no errno.
DISK_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EROFS: "the file system is read-only",
               errno.EDQUOT: "the disk quota is exhausted"}  # fmt: skip
DISK_ERROR_TEXTS = {"os error 28": errno.ENOSPC, "No space left on device": errno.ENOSPC, "unexpected pos": errno.ENOSPC,
                    "os error 30": errno.EROFS, "Read-only file system": errno.EROFS}  # fmt: skip


def disk_error_code(err: BaseException) -> int | None:
    """ENOSPC / EROFS / EDQUOT when `err` (or what caused it) is a failed write for lack of space or permission."""
    while err is not None:
        if isinstance(err, OSError) and err.errno in DISK_ERRNOS:
            return err.errno
        for text, code in DISK_ERROR_TEXTS.items():
            if text in str(err):
                return code
        err = err.__cause__ or err.__context__
    return None


@contextlib.contextmanager
def disk_errors(output_dir: str | os.PathLike, what: str):
    """Turn a full or read-only disk while `what` writes into `output_dir` into one ValueError naming both."""
    try:
        yield
    except Exception as err:
        code = disk_error_code(err)
        if code is None:
            raise
        raise ValueError(
            f"{output_dir}: {DISK_ERRNOS[code]} while {what}; the last complete model and checkpoints there are "
            "unchanged: free some space (or choose another --output_dir) and run the same command again to resume."
        ) from err
