"""The dataset card (README.md) of a `llmsys clean` output folder, from its report.json."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import DatasetCard, DatasetCardData

from .folders import saved_folder, write_text_atomically


def write_dataset_card(folder: str | Path, *, repo_id: str | None = None, license: str | None = None) -> Path:
    """README.md of a `llmsys clean` output folder: what was kept and dropped, from its report.json."""
    saved = saved_folder(folder)
    report = saved.json("report.json") or {}
    dropped = report.get("dropped") or {}
    steps = report.get("steps") or []
    step_names = [s.get("name", str(s)) if isinstance(s, dict) else str(s) for s in steps]
    metadata = DatasetCardData(
        license=license, tags=["hf-llmsys", "llmsys-clean"], task_categories=["text-generation"], pretty_name=repo_id
    )
    rows = "".join(f"| {key} | {report[key]:,} |\n" for key in ("documents_in", "documents_out", "characters_in", "characters_out") if isinstance(report.get(key), int))  # fmt: skip
    drops = "".join(f"| {rule} | {count:,} |\n" for rule, count in sorted(dropped.items()))
    body = (
        f"---\n{metadata.to_yaml()}\n---\n\n# {repo_id or saved.path.resolve().name}\n\n"
        f"Pretraining text cleaned by `llmsys clean` (hf-llmsys). File: `{saved.data_file.name}`; the full report "
        f"is `report.json`.\n\nSteps: {', '.join(step_names) or 'not recorded'}.\n\n"
        f"| figure | value |\n|---|---|\n{rows}\n"
        + (f"Documents dropped per rule:\n\n| rule | documents |\n|---|---|\n{drops}" if drops else "")
    )
    card = DatasetCard(body)
    path = saved.path / "README.md"
    write_text_atomically(path, str(card))
    return path
