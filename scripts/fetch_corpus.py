#!/usr/bin/env python3
"""Regenerate hf_llmsys/data/corpus/default_corpus.txt.gz from two public-domain Debian packages.

Sources (Debian 12 "bookworm", main):
  * dict-devil 1.0-13.1   -> usr/share/dictd/devil.dict.dz        (Ambrose Bierce, The Devil's Dictionary, 1911)
  * jargon-text 4.4.7-4.1 -> usr/share/doc/jargon-text/jargon.txt.gz (The Jargon File 4.4.7)

Both texts are in the public domain (see hf_llmsys/data/corpus/PROVENANCE.md). Run on a Debian machine:

    python scripts/fetch_corpus.py            # downloads with `apt-get download`, verifies sha256, writes the corpus
    python scripts/fetch_corpus.py --debs DIR # use .deb files already in DIR
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import re
import subprocess
import tempfile
from pathlib import Path

PACKAGES = {
    "dict-devil_1.0-13.1_all.deb": (
        "6a535684def2a1f70cd42da16d12d43f0e9dc3e54e4a329178eebab3170e3154",
        "usr/share/dictd/devil.dict.dz",
    ),
    "jargon-text_4.4.7-4.1_all.deb": (
        "17d05997e30eb3d5d6713929b8e2f81b63a5f50073858ad2a06701c71f54dcdb",
        "usr/share/doc/jargon-text/jargon.txt.gz",
    ),
}
OUT = Path(__file__).resolve().parent.parent / "hf_llmsys" / "data" / "corpus" / "default_corpus.txt.gz"
# The two books are joined by this separator; load_default_corpus() callers may split on it.
DOC_SEPARATOR = "\n\n\n"


def download(debs: Path) -> None:
    """Fetch the pinned .deb files into `debs` with apt-get (run `apt-get update` first)."""
    for name in PACKAGES:
        pkg, version = name.split("_")[:2]
        subprocess.run(["apt-get", "download", f"{pkg}={version}"], cwd=debs, check=True)


def extract(deb: Path, member: str, workdir: Path) -> str:
    """Verify the .deb's sha256, unpack it with dpkg-deb and return the gunzipped member as text."""
    expected = PACKAGES[deb.name][0]
    actual = hashlib.sha256(deb.read_bytes()).hexdigest()
    if actual != expected:
        raise ValueError(f"{deb}: sha256 {actual} != pinned {expected}; the package changed, re-check its licence")
    target = workdir / deb.stem
    subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], check=True)
    return gzip.decompress((target / member).read_bytes()).decode("utf-8")


def clean_devil(text: str) -> str:
    """Drop the dictd database header lines that precede the original Wiretap edition."""
    start = text.index("            The Internet Wiretap")
    return text[start:]


def clean_jargon(text: str) -> str:
    """Remove the 3-space indent the Debian text rendering puts on every body line."""
    return "\n".join(line[3:] if line.startswith("   ") else line for line in text.split("\n"))


def normalise(text: str) -> str:
    """Strip trailing spaces, collapse 3+ blank lines to one blank line, end with one newline."""
    text = "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n") + "\n"


def build(debs: Path) -> str:
    """Return the cleaned corpus text built from the .deb files in `debs`."""
    with tempfile.TemporaryDirectory() as tmp:
        devil = extract(debs / "dict-devil_1.0-13.1_all.deb", PACKAGES["dict-devil_1.0-13.1_all.deb"][1], Path(tmp))
        jargon = extract(
            debs / "jargon-text_4.4.7-4.1_all.deb", PACKAGES["jargon-text_4.4.7-4.1_all.deb"][1], Path(tmp)
        )
    return normalise(clean_devil(devil)) + DOC_SEPARATOR + normalise(clean_jargon(jargon))


def main() -> None:
    """Download (or reuse) the packages, build the corpus and write it gzip-compressed with a fixed mtime."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debs", type=Path, help="folder that already holds the two pinned .deb files")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        debs = args.debs or Path(tmp)
        if args.debs is None:
            download(debs)
        text = build(debs)
    data = text.encode("utf-8")
    if len(data) > 3_000_000:
        raise ValueError(f"corpus is {len(data)} bytes, over the 3 MB limit")
    with open(OUT, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        gz.write(data)
    print(f"wrote {OUT} ({len(data)} bytes of text, sha256 {hashlib.sha256(OUT.read_bytes()).hexdigest()})")


if __name__ == "__main__":
    main()
