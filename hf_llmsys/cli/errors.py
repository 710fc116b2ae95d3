"""One line for the user instead of a traceback: which exceptions are the user's to fix, and how to say so.

`llmsys` subcommands raise ``ValueError`` with a message naming the field and the fix for the errors they check
themselves. Everything below is what reaches the command line from the libraries underneath (the file system,
huggingface_hub, safetensors, transformers' strict configs) and is still the user's to fix: a missing or
unreadable file, a full or read-only disk, a repo or revision that does not exist, a corrupt weight file.
`describe(err)` turns such an exception into one line that names the file or repo and the cause; anything
else returns None and is left to propagate as the bug it is.

The registry is ordered: the first matching type wins, so subclasses come before their bases (the Hub's
errors are ``OSError`` subclasses and must be matched before the generic ``OSError`` row).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
    StrictDataclassError,
)

# errno -> what to tell the user to do about it
_OS_FIXES = {
    errno.ENOSPC: "free some space or choose another output folder",
    errno.EROFS: "the file system is read-only: choose a writable output folder",
    errno.EACCES: "check the permissions, or choose another path",
    errno.EPERM: "check the permissions, or choose another path",
    errno.ENOENT: "check the path",
    errno.EISDIR: "give a file, not a folder",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EDQUOT: "the disk quota is exhausted: free some space or choose another output folder",
}


def _os_error(err: OSError) -> str:
    path = err.filename if err.filename is not None else None
    text = str(err).strip()
    cause = err.strerror or (text.splitlines()[0] if text else type(err).__name__)
    fix = _OS_FIXES.get(err.errno)
    where = f"{path}: " if path else ""
    return f"{where}{cause}" + (f" ({fix})" if fix else "")


def _hub_error(kind: str, fix: str) -> Callable[[BaseException], str]:
    def describe_hub(err: BaseException) -> str:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"{kind}: {first} ({fix})"

    return describe_hub


def _http_error(err: BaseException) -> str:
    response = getattr(err, "response", None)
    status = getattr(response, "status_code", None)
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if status == 401:
        return f"not authenticated (HTTP 401): {first} (set HF_TOKEN or run `hf auth login`)"
    if status == 403:
        return f"access denied (HTTP 403): {first} (use a token with write access to this repo)"
    return f"Hub request failed{f' (HTTP {status})' if status else ''}: {first}"


def _unicode_error(err: UnicodeDecodeError) -> str:
    return f"the input is not valid {err.encoding} text ({err.reason} at byte {err.start}): convert it to UTF-8"


def _safetensors_error(err: BaseException) -> str:
    if "while serializing" in str(err):  # writing, not reading: the disk refused (full, read-only, ...)
        return f"could not write a weight file: {err} (free some space or choose another output folder)"
    return f"a weight file is corrupt or truncated: {err} (re-save or re-download the checkpoint)"


def _strict_config_error(err: BaseException) -> str:
    """A config's validation error as the config's own message (its validator's), on one line."""
    cause = err.__cause__ or err.__context__
    return " ".join(str(cause if cause is not None else err).split())


def _registry() -> list[tuple[type[BaseException], Callable]]:
    rows: list[tuple[type[BaseException], Callable]] = [
        (StrictDataclassError, _strict_config_error),
        (RepositoryNotFoundError, _hub_error("repository not found", "check the repo id, and the token if private")),
        (RevisionNotFoundError, _hub_error("revision not found", "check the branch, tag or commit")),
        (GatedRepoError, _hub_error("gated repository", "request access on the Hub, then set HF_TOKEN")),
        (LocalEntryNotFoundError, _hub_error("not in the local cache", "go online or download it first")),
        (EntryNotFoundError, _hub_error("file not found in the repo", "check the file name and revision")),
        (HFValidationError, _hub_error("invalid repo id", "use 'name' or 'namespace/name'")),
        (HfHubHTTPError, _http_error),
        (UnicodeDecodeError, _unicode_error),
        (OSError, _os_error),
    ]
    try:
        from safetensors import SafetensorError

        rows.insert(0, (SafetensorError, _safetensors_error))
    except ImportError:  # pragma: no cover - safetensors is a dependency
        pass
    return rows


USER_ERRORS = _registry()


def describe(err: BaseException) -> str | None:
    """The one-line message for a user-fixable exception, or None when `err` is not one (a bug: let it raise)."""
    if isinstance(err, ValueError) and not isinstance(
        err, UnicodeDecodeError | HFValidationError | StrictDataclassError
    ):
        return str(err)
    for kind, fmt in USER_ERRORS:
        if isinstance(err, kind):
            return fmt(err)
    return None


def debug_enabled() -> bool:
    """LLMSYS_DEBUG=1 re-raises user errors with their traceback (for bug reports)."""
    return os.environ.get("LLMSYS_DEBUG", "") not in ("", "0")
