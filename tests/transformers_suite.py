"""transformers' own common model tests (ModelTesterMixin, ConfigTester), fetched at test time, never vendored.

The installed transformers wheel has no tests; its sdist on PyPI ships the top-level ``tests/*.py`` files
(``test_modeling_common.py``, ``test_configuration_common.py``, ...) but not the sub-packages they import
(``tests/generation/test_utils.py``, ``tests/exporters/test_export.py``, ``tests/utils/...``): setuptools' default
sdist takes ``tests/test*.py`` only. Checked for the sdists of 4.46.0, 4.57.6, 5.0.0, 5.23.0 and 5.24.0: none has
a ``tests/`` sub-folder, so CI (PyPI only) cannot get GenerationTesterMixin from PyPI. This helper:

1. downloads the sdist of the installed transformers version with ``pip download --no-binary :all:`` (PyPI is
   reachable on CI) and unpacks its ``tests/`` into a cache folder as the package ``transformers_tests``
   (``LLMSYS_CACHE_DIR``, default ``~/.cache/hf-llmsys``), once;
2. fills the sub-packages the sdist lacks: from a transformers checkout when ``LLMSYS_TRANSFORMERS_TESTS_DIR``
   points at its ``tests/`` folder (then GenerationTesterMixin runs), else with ``SHIMS`` below: an empty
   ``ExportTesterMixin`` (export tests need ONNX / ExecuTorch / OpenVINO runtimes and are out of scope) and a
   ``GenerationTesterMixin`` marked unavailable (its tests are then skipped, with that reason). A sub-module the
   checkout lacks falls back to its shim, so a folder holding only ``tests/generation/test_utils.py`` will do;
3. returns the imported modules, or raises ``SuiteUnavailable`` with the reason (no network, pip failure).

Running the generation tests locally. Best: a clone of huggingface/transformers at tag ``v5.24.0`` (the installed
version), ``LLMSYS_TRANSFORMERS_TESTS_DIR=<clone>/tests``. Any folder laid out like a checkout works:
``<folder>/tests/generation/test_utils.py`` plus ``<folder>/src/transformers/__init__.py`` of the same commit;
the latter tells ``generation_tests_version()`` which version the tests are (unknown without it). Where no
v5.24.0 copy can be had, the newest one found so far is transformers 5.10.0.dev0's (its last change: upstream
commit 9681fd1e64 of 2026-06-05); it was produced with
``git archive <ref> tests/generation/test_utils.py src/transformers/__init__.py | tar x -C <folder>`` from a
snapshot of huggingface/transformers-test-ci, ref 116fe1e7c568 (the newest version line among its branches).
Every name it imports exists in 5.24.0, and it needs nothing else under ``tests/``. Its tests that fail on
transformers' own models under 5.24 too (the version gap, not the model) are listed in
``tests/test_transformers_common.py`` (``OTHER_VERSION_FAILURES``) and expected to fail while the versions differ.

Example: ``LLMSYS_TRANSFORMERS_TESTS_DIR=/work/cache/transformers-tests-5.10.0.dev0/tests python -m pytest
tests/test_transformers_common.py``. The cached package is rewritten from the checkout (or the shims) on every
load: give runs with and without the checkout separate ``LLMSYS_CACHE_DIR`` folders when they run at once.
"""

from __future__ import annotations

import importlib
import os
import re
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


def generation_tests_version() -> str | None:
    """The transformers version of the checkout given in ``LLMSYS_TRANSFORMERS_TESTS_DIR`` (read from its
    ``../src/transformers/__init__.py``), or None: no checkout, or one without that file."""
    checkout = os.environ.get("LLMSYS_TRANSFORMERS_TESTS_DIR")
    if not checkout:
        return None
    init = Path(checkout).resolve().parent / "src" / "transformers" / "__init__.py"
    if not init.is_file():
        return None
    found = re.search(r'^__version__ = "([^"]+)"', init.read_text(), flags=re.MULTILINE)
    return found.group(1) if found else None
