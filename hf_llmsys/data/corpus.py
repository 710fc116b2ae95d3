"""The embedded default corpus and strict UTF-8 reading of user text files.

The corpus (The Devil's Dictionary + The Jargon File 4.4.7, both public domain, taken from Debian packages)
ships as `hf_llmsys/data/corpus/default_corpus.txt.gz`; see PROVENANCE.md there and scripts/fetch_corpus.py.
"""

from __future__ import annotations

import gzip
import os
from importlib import resources

CORPUS_FILE = "default_corpus.txt.gz"


def load_default_corpus() -> str:
    """Return the embedded public-domain English corpus (about 2 MB of text) as one string."""
    blob = resources.files("hf_llmsys.data").joinpath("corpus", CORPUS_FILE).read_bytes()
    return gzip.decompress(blob).decode("utf-8")


def read_text_file(path: str | os.PathLike) -> str:
    """Read a UTF-8 text file; raise ValueError naming the file (and byte offset) if it is not valid UTF-8."""
    data = open(path, "rb").read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{os.fspath(path)}: not valid UTF-8 at byte offset {err.start} ({err.reason}); "
            "re-encode the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
        ) from err


def split_documents(text: str, chunk_chars: int = 4096) -> list[str]:
    """Cut `text` into contiguous chunks of about `chunk_chars` characters, breaking at paragraph ends.

    Chunks are the unit of the train/validation split, so held-out text never overlaps training text.
    Concatenating the chunks gives back `text` exactly.
    """
    if chunk_chars <= 0:
        raise ValueError(f"chunk_chars must be > 0, got {chunk_chars}")
    chunks, start = [], 0
    while start < len(text):
        end = min(start + chunk_chars, len(text))
        if end < len(text):
            cut = text.rfind("\n\n", start + chunk_chars // 2, end)
            end = cut + 2 if cut != -1 else end
        chunks.append(text[start:end])
        start = end
    return chunks
