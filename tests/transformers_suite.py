"""transformers' own common model tests (ModelTesterMixin, ConfigTester), fetched at test time, never vendored.

The installed transformers wheel has no tests; its sdist on PyPI ships the top-level ``tests/*.py`` files
(``test_modeling_common.py``, ``test_configuration_common.py``, ...) but not the sub-packages they import
(``tests/generation/test_utils.py``, ``tests/exporters/test_export.py``, ``tests/utils/...``). This helper:

1. downloads the sdist of the installed transformers version with ``pip download --no-binary :all:`` (PyPI is
   reachable on CI) and unpacks its ``tests/`` into a cache folder as the package ``transformers_tests``
   (``LLMSYS_CACHE_DIR``, default ``~/.cache/hf-llmsys``), once;
2. fills the sub-packages the sdist lacks: from a transformers checkout of the same version when
   ``LLMSYS_TRANSFORMERS_TESTS_DIR`` points at its ``tests/`` folder (then GenerationTesterMixin runs), else with
   ``SHIMS`` below: an empty ``ExportTesterMixin`` (export tests need ONNX / ExecuTorch / OpenVINO runtimes and
   are out of scope) and a ``GenerationTesterMixin`` marked unavailable (its tests are then skipped, with that
   reason, and ``tests/test_transformers_common.py`` runs its generation contracts itself);
3. returns the imported modules, or raises ``SuiteUnavailable`` with the reason (no network, pip failure).
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import transformers

PACKAGE = "transformers_tests"
# transformers' tests/utils/test_configuration_utils.py, ``config_common_kwargs`` (used by ConfigTester): data.
CONFIG_COMMON_KWARGS = """config_common_kwargs = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["BertModel"],
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
}
"""
GENERATION_UNAVAILABLE = (
    "transformers' GenerationTesterMixin (tests/generation/test_utils.py) is not in the transformers sdist on PyPI; "
    "set LLMSYS_TRANSFORMERS_TESTS_DIR to the tests/ folder of a transformers v{version} checkout to run it"
)
SHIMS = {
    "exporters/test_export.py": "class ExportTesterMixin:\n    pass\n",
    "utils/test_configuration_utils.py": CONFIG_COMMON_KWARGS,
    "generation/test_utils.py": "class GenerationTesterMixin:\n    llmsys_unavailable = True\n",
}


class SuiteUnavailable(RuntimeError):
    """transformers' test files could not be obtained here (the message says why)."""


def cache_root() -> Path:
    return Path(os.environ.get("LLMSYS_CACHE_DIR", Path.home() / ".cache" / "hf-llmsys"))


def _download_tests(target: Path) -> None:
    """pip-download the sdist of the installed transformers and unpack its top-level ``tests/`` into ``target``."""
    version = transformers.__version__
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", tmp]
        try:
            done = subprocess.run(
                [*command, f"transformers=={version}"], capture_output=True, text=True, timeout=600, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise SuiteUnavailable(f"pip download of the transformers {version} sdist failed: {error}") from error
        archives = list(Path(tmp).glob("transformers-*.tar.gz"))
        if done.returncode != 0 or not archives:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise SuiteUnavailable(f"pip download of the transformers {version} sdist failed: {tail[0]}")
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".staging-"))
        with tarfile.open(archives[0]) as archive:
            prefix = f"{archives[0].name.removesuffix('.tar.gz')}/tests/"
            members = [m for m in archive.getmembers() if m.name.startswith(prefix) and m.isfile()]
            for member in members:
                member.name = member.name[len(prefix) :]
            archive.extractall(staging, members=members, filter="data")
        if not (staging / "test_modeling_common.py").exists():
            shutil.rmtree(staging, ignore_errors=True)
            raise SuiteUnavailable(f"the transformers {version} sdist has no tests/test_modeling_common.py")
        staging.rename(target)  # atomic: a half-unpacked folder is never used


def _complete_package(package: Path) -> None:
    """``__init__.py`` files, then the sub-modules the sdist lacks: from a checkout if given, else the shims."""
    checkout = os.environ.get("LLMSYS_TRANSFORMERS_TESTS_DIR")
    for relative, shim in SHIMS.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        source = Path(checkout) / relative if checkout else None
        path.write_text(source.read_text() if source is not None and source.exists() else shim)
    for folder in [package, *[p for p in package.rglob("*") if p.is_dir()]]:
        (folder / "__init__.py").touch()


def load_suite():
    """(test_modeling_common, test_configuration_common, generation.test_utils) of the installed transformers."""
    root = cache_root() / f"transformers-{transformers.__version__}"
    package = root / PACKAGE
    try:
        if not (package / "test_modeling_common.py").exists():
            root.mkdir(parents=True, exist_ok=True)
            try:
                _download_tests(package)
            except FileExistsError:  # another process unpacked it first
                pass
        _complete_package(package)
    except OSError as error:
        raise SuiteUnavailable(f"cannot prepare transformers' test files under {root}: {error}") from error
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        modeling = importlib.import_module(f"{PACKAGE}.test_modeling_common")
        configuration = importlib.import_module(f"{PACKAGE}.test_configuration_common")
        generation = importlib.import_module(f"{PACKAGE}.generation.test_utils")
    except ImportError as error:
        raise SuiteUnavailable(f"transformers' test files do not import here: {error}") from error
    return modeling, configuration, generation


def generation_unavailable_reason(generation_module) -> str | None:
    """Why GenerationTesterMixin cannot run here, or None when the real one was loaded."""
    if getattr(generation_module.GenerationTesterMixin, "llmsys_unavailable", False):
        return GENERATION_UNAVAILABLE.format(version=transformers.__version__)
    return None
