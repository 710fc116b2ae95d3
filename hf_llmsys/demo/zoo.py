"""Where the demo's trained models come from: the positional-encoding zoo (a folder, a Hub repo, or trained in the
background on first run) and the real pretrained SmolLM2 checkpoint where it has been fetched.

Resolution order when no ``--zoo`` is given: the full zoo of ``scripts/pe_zoo.py`` (``runs/pe_zoo``) when it holds
a ``zoo.json``, else the cached demo zoo (``~/.cache/hf_llmsys/pe_zoo_demo``, env ``LLMSYS_DEMO_ZOO_DIR``), else
that cache is trained in a background thread with the ``demo`` preset of ``hf_llmsys.experiments.positional_zoo``
(progress readable at any time from ``ZooManager.status()``). A folder is complete once its ``zoo.json`` exists
(the zoo writes it last); training goes to a staging folder that is renamed into place, so an interrupted run never
leaves a half-written cache.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from ..experiments.positional_zoo import FORMAT_VERSION, PRESETS, ZooSettings, rescaled_rope_model, run_zoo
from .console import quiet_libraries

FULL_ZOO_DIR = Path("runs/pe_zoo")


def default_cache_dir() -> Path:
    """The demo zoo's cache folder: ``$LLMSYS_DEMO_ZOO_DIR`` or ``~/.cache/hf_llmsys/pe_zoo_demo``."""
    return Path(os.environ.get("LLMSYS_DEMO_ZOO_DIR", Path.home() / ".cache" / "hf_llmsys" / "pe_zoo_demo"))


def is_complete(folder: Path) -> bool:
    """A zoo folder is usable once zoo.json (written last) and the tokenizer exist."""
    return (folder / "zoo.json").is_file() and (folder / "tokenizer").is_dir()


def resolve_zoo_source(source: str | None) -> Path:
    """A local folder from ``--zoo`` (a folder or a Hub repo id, downloaded with snapshot_download)."""
    if source is None:
        raise ValueError("resolve_zoo_source needs a source")
    path = Path(source).expanduser()
    if path.exists():
        if not is_complete(path):
            raise ValueError(f"--zoo {source}: the folder has no zoo.json and tokenizer/; train one with "
                             "`python scripts/pe_zoo.py --out FOLDER` or leave --zoo out to train the demo zoo.")  # fmt: skip
        return path
    if source.count("/") != 1 or source.startswith((".", "/", "~")):
        raise ValueError(f"--zoo {source}: no such folder, and not a Hub repo id of the form 'owner/name'.")
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(repo_id=source))
    except Exception as error:  # offline, unknown repo, no permission: all reach the user the same way
        raise ValueError(
            f"--zoo {source}: could not download the Hub repo ({type(error).__name__}: {error})."
        ) from error
    if not is_complete(folder):
        raise ValueError(f"--zoo {source}: the Hub repo holds no zoo (zoo.json and tokenizer/ are missing).")
    return folder


@dataclass
class LoadedZoo:
    """A zoo in memory: its report (zoo.json), shared tokenizer and one causal LM per trained encoding."""

    folder: Path
    report: dict
    tokenizer: object
    models: dict[str, torch.nn.Module]

    @property
    def train_length(self) -> int:
        return int(self.report["settings"]["train_length"])

    def rope_with_scaling(self, scaling: str, factor: float):
        """The RoPE model rescaled at inference (linear / dynamic / yarn) by ``factor`` (positional_zoo)."""
        with quiet_libraries():
            return rescaled_rope_model(self.folder / "checkpoints" / "rope", scaling, factor, self.train_length)


def load_zoo(folder: Path) -> LoadedZoo:
    """Load zoo.json, the tokenizer and every trained (unscaled) run's checkpoint, in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import hf_llmsys  # noqa: F401  (registers llmsys_llama with the Auto classes)

    report = json.loads((folder / "zoo.json").read_text())
    if report.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{folder}/zoo.json has format_version {report.get('format_version')}, this demo reads "
                         f"{FORMAT_VERSION}; retrain it with scripts/pe_zoo.py.")  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    models = {}
    for run in report["runs"]:
        if run.get("rope_scaling") is None:
            models[run["name"]] = AutoModelForCausalLM.from_pretrained(folder / run["checkpoint"]).eval()
    return LoadedZoo(folder, report, tokenizer, models)


@dataclass
class RealModel:
    """The fetched pretrained checkpoint (SmolLM2-135M-Instruct converted by scripts/fetch_smollm2.py)."""

    name: str
    model: torch.nn.Module
    tokenizer: object


def load_real_model(cache_dir: Path | None = None) -> RealModel | None:
    """SmolLM2 when scripts/fetch_smollm2.py has converted it (``checkpoints.smollm2.find_smollm2``), else None."""
    from transformers import AutoTokenizer

    from ..checkpoints.smollm2 import find_smollm2
    from ..models import LlmsysLlamaForCausalLM

    folder = find_smollm2(cache_dir)
    if folder is None:
        return None
    with quiet_libraries():  # a Llama folder read into our class: transformers notes the model_type, as expected
        model = LlmsysLlamaForCausalLM.from_pretrained(folder).eval()
        return RealModel(folder.name, model, AutoTokenizer.from_pretrained(folder))


@dataclass
class ZooManager:
    """Finds, trains (in the background) and loads the zoo; thread-safe status for the page's progress box."""

    source: str | None = None
    cache_dir: Path = field(default_factory=default_cache_dir)
    train: bool = True
    preset: str = "demo"
    settings_overrides: dict = field(default_factory=dict)
    skip_folders: tuple[Path, ...] = ()  # e.g. the full zoo, under --quick
    _zoo: LoadedZoo | None = None
    _events: list[dict] = field(default_factory=list)
    _error: str | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _started: float | None = None

    def start(self) -> None:
        """Load the zoo now if one exists; else start training it in the background (unless train=False)."""
        folder = self.existing_folder()
        if folder is not None:
            with quiet_libraries():
                self._set_zoo(load_zoo(folder))
        elif self.train:
            self._started = time.time()
            self._thread = threading.Thread(target=self._train_and_load, name="demo-zoo-training", daemon=True)
            self._thread.start()

    def existing_folder(self) -> Path | None:
        """--zoo if given, else the full zoo, else the cached demo zoo; None when none is complete."""
        if self.source is not None:
            return resolve_zoo_source(self.source)
        for folder in (FULL_ZOO_DIR, self.cache_dir):
            if folder not in self.skip_folders and is_complete(folder):
                return folder
        return None

    def _progress(self, event: dict) -> None:
        with self._lock:
            self._events.append({**event, "time": time.time()})
        self._print_progress(event)

    def _print_progress(self, event: dict) -> None:
        """The console's one progress line (the Trainer's log dicts are off): rewritten in place on a terminal,
        else one line per stage (tokenizer and data, each model, done). The first line ends at once, so the server's
        start-up lines printed meanwhile do not run into it."""
        if event["stage"] == "done":
            line, end = "demo zoo: trained; loading it", "\n"
        else:
            line = "demo zoo: " + self.status().split(": ", 1)[-1].split(" Tabs 2 and 4")[0]
            end = "\n" if event["stage"] == "data" else ""
        stream = sys.stderr
        if stream.isatty():
            stream.write("\r\033[K" + line + end)
        elif event["stage"] != "train" or end:
            stream.write(line + "\n")
        stream.flush()

    def _train_and_load(self) -> None:
        staging = self.cache_dir.with_name(self.cache_dir.name + ".partial")
        with quiet_libraries():  # the console shows this manager's one progress line, not the libraries' bars
            self._train_and_load_quietly(staging)

    def _train_and_load_quietly(self, staging: Path) -> None:
        try:
            shutil.rmtree(staging, ignore_errors=True)
            settings = replace(ZooSettings(out=staging), **{**PRESETS[self.preset], **self.settings_overrides})
            run_zoo(settings, progress=self._progress)
            shutil.rmtree(self.cache_dir, ignore_errors=True)
            self.cache_dir.parent.mkdir(parents=True, exist_ok=True)
            staging.rename(self.cache_dir)
            self._set_zoo(load_zoo(self.cache_dir))
        except Exception as error:  # shown in the page; the demo's zoo-free tabs keep working
            with self._lock:
                self._error = f"{type(error).__name__}: {error}"

    def _set_zoo(self, zoo: LoadedZoo) -> None:
        with self._lock:
            self._zoo = zoo

    @property
    def zoo(self) -> LoadedZoo | None:
        with self._lock:
            return self._zoo

    @property
    def training(self) -> bool:
        """Whether background training is running now."""
        return self._thread is not None and self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> LoadedZoo | None:
        """Block until background training ends (tests, the benchmark); returns the zoo or None."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.zoo

    def limits(self) -> str:
        """``zoo_limits`` of the loaded zoo, else of the preset it is training with."""
        from ..models.positional_encodings import POSITIONAL_ENCODINGS

        zoo = self.zoo
        if zoo is not None:
            return zoo_limits(zoo.report["settings"], len(zoo.models))
        return zoo_limits(PRESETS[self.preset], len(POSITIONAL_ENCODINGS))

    def status(self) -> str:
        """One Markdown line for the page: loaded from where, training progress, or why there is no zoo."""
        with self._lock:
            zoo, error, events = self._zoo, self._error, list(self._events)
        if zoo is not None:
            names = ", ".join(zoo.models)
            return f"Zoo loaded from `{zoo.folder}` (trained on {zoo.train_length} tokens): {names}."
        if error is not None:
            return f"Zoo training failed: {error}"
        if self._thread is None:
            return ("No zoo: none found and background training is off (`--no-train`). Tabs 1, 3 and 5 work "
                    "without one; pass `--zoo FOLDER_OR_REPO_ID` or drop `--no-train`.")  # fmt: skip
        return training_status(events, PRESETS[self.preset], time.time() - (self._started or time.time()))


def zoo_limits(settings: dict, runs: int) -> str:
    """The zoo's limits in one sentence, from zoo.json's ``settings`` (or a preset of ``PRESETS``)."""
    model = settings.get("model", settings)
    size = f"{model['num_hidden_layers']}-layer, width-{model['hidden_size']}"
    data = f"{settings['train_tokens']:,} tokens" if "train_tokens" in settings else "2 MB of text"
    return (f"The zoo is {runs} tiny {size} models trained for {settings['steps']} steps on {data} "
            f"({settings['train_length']}-token windows, a {settings['vocab_size']}-token byte-level BPE): enough to "
            "compare positional encodings with each other, far too little to write or score English the way a "
            "pretrained model does.")  # fmt: skip


def training_status(events: list[dict], preset: dict, elapsed: float) -> str:
    """Progress of the background zoo training as one Markdown line (runs done, step of the current run)."""
    from ..models.positional_encodings import POSITIONAL_ENCODINGS

    total_runs = len(POSITIONAL_ENCODINGS)
    done = sum(1 for e in events if e["stage"] == "evaluate" and e.get("run") in POSITIONAL_ENCODINGS)
    last = events[-1] if events else {"stage": "data"}
    if last["stage"] == "train":
        where = f"training `{last['run']}`: step {last['step']}/{last['steps']}"
    elif last["stage"] == "evaluate":
        where = f"evaluating `{last['run']}`"
    else:
        where = "tokenizer and data"
    steps = preset.get("steps", "?")
    return (f"Training the demo zoo in the background ({total_runs} encodings x {steps} steps): "
            f"{done}/{total_runs} models done, {where}; {elapsed:.0f} s so far. Tabs 2 and 4 fill in when it ends.")  # fmt: skip
