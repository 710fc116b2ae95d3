"""The full sha256 check of a saved model folder (``weight_integrity.py``): `llmsys verify FOLDER [--update]`.

Loading checks only sizes and safetensors headers; this hashes every weight file against ``checksums.sha256``
and its size against ``checksums.sizes``; a mismatch is a ValueError naming each file that differs (the command,
``cli/verify.py``, prints the one-line report).
``--update`` records the files as they are now (after a deliberate edit), so strict loads accept them again.
"""

from __future__ import annotations

from pathlib import Path

# weight_integrity imports transformers: imported by the functions


def verify_checkpoint(folder: str | Path, *, update: bool = False) -> dict:
    """{folder, files, problems} of the full check; raises ValueError naming the files that differ (unless
    `update`: then the manifests are rewritten and `problems` lists what was accepted)."""
    from .weight_integrity import CHECKSUM_FILE, read_manifest, verify_folder, weight_files, write_manifests

    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder; give the folder save_pretrained wrote.")
    if not weight_files(folder):
        raise ValueError(f"{folder}: no weight files (*.safetensors, *.bin) to verify.")
    listed = read_manifest(folder / CHECKSUM_FILE)
    if not listed and not update:
        raise ValueError(
            f"{folder}: no {CHECKSUM_FILE} (not saved by hf-llmsys, or saved before it recorded one); "
            f"`llmsys verify {folder} --update` records the files as they are now."
        )
    problems = verify_folder(folder)
    if update:
        write_manifests(folder)
    elif problems:
        raise ValueError(
            "; ".join(problems) + f". Copy or download them again, or accept them as they are with "
            f"`llmsys verify {folder} --update`."
        )
    files = sorted(weight_files(folder)) if update else sorted(listed)
    return {"folder": str(folder), "files": files, "problems": problems, "updated": update}
