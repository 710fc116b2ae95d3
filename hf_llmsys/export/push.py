"""`llmsys push FOLDER REPO_ID --format transformers`: the model (or a LoRA adapter over one, merged) is exported into
a hidden temporary folder beside FOLDER (`export`: transformers' own classes, no remote code), and that folder is
pushed (``hub/transfer.py``'s `push_folder`) with the export's card, which says it is the transformers-native export;
a model no transformers class expresses is refused before anything is created on the Hub.

Here, not in ``hub/``: it uses both, and the export reads the Hub's card words (``hub/architecture.py``), so the
Hub's transport stays below the export.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..hub.transfer import checked_repo_id, full_repo_id, push_folder
from . import export


def push_export(folder: str | Path, repo_id: str, format: str, **push_args) -> dict:
    """Export ``folder`` (into a hidden temporary folder beside it) and push the export; `push_args`: `push_folder`'s
    (private, revision, commit_message, api)."""
    if format != "transformers":
        raise ValueError(f"--format {format!r}: push can export to transformers only; write a GGUF file with "
                         "`llmsys export --format gguf` and upload it with `hf upload`.")  # fmt: skip
    from huggingface_hub import HfApi

    api = push_args.pop("api", None) or HfApi()
    repo_id = full_repo_id(api, checked_repo_id(repo_id))
    source = Path(folder).expanduser().resolve()
    with tempfile.TemporaryDirectory(prefix=".llmsys-push-export-", dir=source.parent) as staging:
        exported = export(source, Path(staging) / source.name, format=format, repo_id=repo_id)
        message = push_args.pop("commit_message", None) or "Upload the transformers-native export with hf-llmsys"
        return push_folder(exported, repo_id, api=api, commit_message=message, write_card=False, **push_args)
