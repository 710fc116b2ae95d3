"""Saved folders and the Hub: what `llmsys push FOLDER REPO_ID` and `llmsys pull REPO_ID FOLDER` do (their parsers:
``hf_llmsys/cli/hub.py``).

push: checks the folder (a saved model, PEFT adapter or `llmsys clean` output; see ``folders.py``), writes or
refreshes its model card, creates the repo (``--private``) and the branch (``--revision``) when missing, and
uploads the folder as ONE commit (``HfApi.upload_folder``): if the upload fails midway the repo stays at its
previous commit, and running the same command again completes it; files whose content the Hub already has at
that revision are skipped by the client, so an unchanged re-push makes no commit. Trainer checkpoints
(``checkpoint-*``) and hidden files stay local. A dataset folder goes through ``Dataset.push_to_hub`` (parquet
shards and the dataset card with its ``dataset_info``), then ``report.json`` is added beside it.

push --format transformers (``hf_llmsys/export/push.py``, above this module: it exports, then pushes with
`push_folder`): the export, not the folder, is what the repo receives.

pull: resolves the revision (branch, tag or commit sha) to a commit, then ``snapshot_download``s exactly that
commit into FOLDER; a model folder with ``checksums.sha256`` is then verified byte for byte (``llmsys verify``), so
later loads need only the cheap size and header checks.

The token is huggingface_hub's: ``HF_TOKEN``, else the login stored by ``hf auth login``. The client's typed
errors become one ValueError line naming the repo, the revision and the fix (`llmsys` prints it, exit 2).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from transformers.utils import logging

if TYPE_CHECKING:
    from huggingface_hub import HfApi

    from .folders import SavedFolder

# huggingface_hub (its HTTP stack: seconds on a busy machine), the card, dataset-card and verify code (torch,
# transformers, jinja2) are imported where they are used.

logger = logging.get_logger(__name__)

# Never uploaded from a training output folder: Trainer checkpoints, hidden temporaries, logs, caches.
PUSH_IGNORE = ["checkpoint-*", "checkpoint-*/**", ".*", ".*/**", "**/__pycache__/**", "runs/**", "*.tmp"]


def snapshot_download(*args, **kwargs) -> str:
    """``huggingface_hub.snapshot_download``, imported when called."""
    from huggingface_hub import snapshot_download as download

    return download(*args, **kwargs)


def transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client's network exceptions (connection refused / dropped / timed out)."""
    try:
        import httpx2

        return (httpx2.TransportError,)
    except ImportError:  # pragma: no cover - older huggingface_hub uses httpx
        import httpx

        return (httpx.TransportError,)


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def status_of(err: BaseException) -> int | None:
    return getattr(getattr(err, "response", None), "status_code", None)


@contextlib.contextmanager
def hub_errors(api: HfApi, repo_id: str, repo_type: str, revision: str | None, action: str):
    """Turn the client's typed errors into one ValueError line naming the repo, revision and fix."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{repo_type} repo {repo_id}"
    try:
        yield
    except RevisionNotFoundError as err:
        raise ValueError(
            f"revision {revision!r} not found in {where}{known_refs(api, repo_id, repo_type)}: give an existing "
            "branch, tag or commit sha."
        ) from err
    except GatedRepoError as err:
        raise ValueError(f"{where} is gated: request access on the Hub, then set HF_TOKEN.") from err
    except RepositoryNotFoundError as err:
        raise ValueError(
            f"{where} not found on {api.endpoint}, or it is private and your token cannot see it: check the id, "
            "and set HF_TOKEN (or run `hf auth login`) with a token of its owner."
        ) from err
    except EntryNotFoundError as err:
        raise ValueError(f"a file was not found in {where} at {revision or 'main'}: {first_line(err)}.") from err
    except HfHubHTTPError as err:
        status = status_of(err)
        if status == 401:
            raise ValueError(
                f"the Hub rejected the token (HTTP 401) while trying to {action} {where}: set a valid HF_TOKEN or "
                "run `hf auth login`."
            ) from err
        if status == 403:
            raise ValueError(
                f"no write access to {where} (HTTP 403): use a token with write access to its namespace."
            ) from err
        raise ValueError(
            f"the Hub answered HTTP {status} while trying to {action} {where} ({first_line(err)}); nothing was "
            "committed: run the same command again."
        ) from err
    except transport_errors() as err:
        raise ValueError(
            f"the connection to {api.endpoint} failed while trying to {action} {where} ({type(err).__name__}: "
            f"{first_line(err)}); nothing was committed: run the same command again."
        ) from err


def known_refs(api: HfApi, repo_id: str, repo_type: str) -> str:
    """' (branches: main, dev; tags: v1)' for error messages, or '' if the refs cannot be read."""
    try:
        refs = api.list_repo_refs(repo_id, repo_type=repo_type)
    except Exception:  # noqa: BLE001 - best effort decoration of an error message
        return ""
    tags = ", ".join(t.name for t in refs.tags) or "none"
    return f" (branches: {', '.join(b.name for b in refs.branches)}; tags: {tags})"


def checked_repo_id(repo_id: str) -> str:
    """A valid Hub id ('namespace/name' or 'name'); ValueError naming REPO_ID and the form otherwise."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise ValueError(
            f"REPO_ID {repo_id!r} is not a valid Hub repo id: use 'namespace/name' (letters, digits, '-', '_', "
            f"'.'; at most 96 characters) ({first_line(err)})."
        ) from err
    if repo_id.count("/") > 1 or repo_id.startswith("/") or repo_id.endswith("/"):
        raise ValueError(f"REPO_ID {repo_id!r} is not a valid Hub repo id: use 'namespace/name'.")
    return repo_id


def full_repo_id(api: HfApi, repo_id: str) -> str:
    """'name' -> 'user/name' with the token's user (the Hub does the same); 'ns/name' unchanged."""
    if "/" in repo_id:
        return repo_id
    with hub_errors(api, repo_id, "model", None, "find the user of"):
        return f"{api.whoami()['name']}/{repo_id}"


def upload_summary(folder: Path) -> str:
    """'12 files, 3.4 MB' for the files upload_folder will consider (same ignore rules)."""
    paths = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
    from huggingface_hub.utils import filter_repo_objects

    kept = list(filter_repo_objects(paths, ignore_patterns=PUSH_IGNORE))
    size = sum((folder / p).stat().st_size for p in kept)
    return f"{len(kept)} files, {size / 1e6:.1f} MB"


def head_commit(api: HfApi, repo_id: str, repo_type: str, revision: str) -> str | None:
    """The commit a branch points at, or None when the branch does not exist yet."""
    refs = api.list_repo_refs(repo_id, repo_type=repo_type)
    return next((b.target_commit for b in refs.branches if b.name == revision), None)


def push_folder(
    folder: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
    api: HfApi | None = None,
    write_card: bool = True,
) -> dict:
    """Push a saved folder as one commit; returns {repo_id, revision, commit, commit_url, changed}.

    ``write_card=False`` pushes the folder's own README.md as is (the transformers-native export: ``export.push``)."""
    from huggingface_hub import HfApi

    from .folders import saved_folder

    api = api or HfApi()
    saved = saved_folder(folder)
    repo_id = full_repo_id(api, checked_repo_id(repo_id))
    branch = revision or "main"
    message = commit_message or f"Upload {saved.kind} with hf-llmsys"
    with hub_errors(api, repo_id, saved.repo_type, branch, "push to"):
        url = api.create_repo(repo_id, repo_type=saved.repo_type, private=private, exist_ok=True)
        repo_id = url.repo_id
        if branch != "main":
            api.create_branch(repo_id, repo_type=saved.repo_type, branch=branch, exist_ok=True)
        before = head_commit(api, repo_id, saved.repo_type, branch)
        logger.info(
            f"pushing {saved.kind} {saved.path} ({upload_summary(saved.path)}) to {saved.repo_type} repo {repo_id} "
            f"(branch {branch})"
        )
        if saved.kind == "dataset":
            commit = push_dataset(api, saved, repo_id, branch, message, private)
        else:
            warn_about_local_base(saved)
            if write_card:
                refresh_card(saved, repo_id)
            commit = api.upload_folder(
                folder_path=saved.path,
                repo_id=repo_id,
                repo_type=saved.repo_type,
                revision=branch,
                commit_message=message,
                ignore_patterns=PUSH_IGNORE,
            )
        after = head_commit(api, repo_id, saved.repo_type, branch)
    changed = after != before
    commit_url = commit.commit_url if changed else f"{url.rstrip('/')}/commit/{after}"
    return {"repo_id": repo_id, "revision": branch, "commit": after, "commit_url": commit_url, "changed": changed}


def refresh_card(saved: SavedFolder, repo_id: str) -> None:
    """Write or refresh the card before uploading; a model of a foreign type is pushed with its own README."""
    from .architecture import UnknownArchitectureError
    from .cards import write_model_card

    try:
        write_model_card(saved.path, repo_id=repo_id)
    except UnknownArchitectureError as err:
        logger.warning(f"no model card written ({err}); the folder's own README.md, if any, is pushed as is")


def warn_about_local_base(saved: SavedFolder) -> None:
    """An adapter whose base is a local path cannot be loaded from the Hub by others: say so before pushing."""
    if saved.kind != "adapter":
        return
    base = (saved.json("adapter_config.json") or {}).get("base_model_name_or_path")
    from .folders import is_hub_id

    if not is_hub_id(base):
        logger.warning(
            f"the adapter's base model is the local path {base!r}: others cannot load it from the Hub "
            "until you push the base too and set base_model_name_or_path in adapter_config.json to its repo id"
        )


def push_dataset(api: HfApi, saved: SavedFolder, repo_id: str, branch: str, message: str, private: bool):
    """`llmsys clean` output: the data through Dataset.push_to_hub, then report.json (skipped if unchanged)."""
    from datasets import Dataset

    from .cards import write_dataset_card

    write_dataset_card(saved.path, repo_id=repo_id)
    data = saved.data_file
    dataset = Dataset.from_parquet(str(data)) if data.suffix == ".parquet" else Dataset.from_json(str(data))
    dataset.push_to_hub(repo_id, revision=branch, private=private, commit_message=message, token=api.token)
    return api.upload_file(
        path_or_fileobj=saved.path / "report.json",
        path_in_repo="report.json",
        repo_id=repo_id,
        repo_type="dataset",
        revision=branch,
        commit_message=f"{message}: cleaning report",
    )


def pull_repo(
    repo_id: str, folder: str | Path, *, revision: str | None = None, repo_type: str = "model", api: HfApi | None = None
) -> dict:
    """Download one revision (branch, tag or sha) of a repo into ``folder`` and verify a model folder's checksums;
    returns {repo_id, commit, files, path, verified: the verify report or None}."""
    from huggingface_hub import HfApi

    from ..checkpoints.verify import verify_checkpoint
    from ..checkpoints.weight_integrity import CHECKSUM_FILE

    api = api or HfApi()
    checked_repo_id(repo_id)
    revision = revision or "main"
    with hub_errors(api, repo_id, repo_type, revision, "pull"):
        info = api.repo_info(repo_id, repo_type=repo_type, revision=revision)
        logger.info(f"pulling {repo_type} repo {repo_id} at {revision} (commit {info.sha}) into {folder}")
        path = snapshot_download(repo_id, repo_type=repo_type, revision=info.sha, local_dir=folder, token=api.token)
    files = sorted(str(p.relative_to(path)) for p in Path(path).rglob("*") if p.is_file() and ".cache" not in p.parts)
    verified = verify_checkpoint(path) if (Path(path) / CHECKSUM_FILE).is_file() else None
    return {"repo_id": repo_id, "commit": info.sha, "files": files, "path": str(path), "verified": verified}
