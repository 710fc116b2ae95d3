"""`llmsys clean` end to end: inputs, outputs, report, determinism, bad input, atomic output, the bench script."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from datasets import Dataset

from hf_llmsys.cleaning import files
from hf_llmsys.cli import main as llmsys

PROSE = [
    "The history of the city is long and varied. Its first settlers arrived by boat from the south, and they built "
    "houses with stone taken from the hills. Over the centuries the town grew into a market for wool, grain and "
    "fish, and it became known for the quality of the cloth that its weavers made for the courts of Europe.",
    "Scientists have studied the behaviour of bees for many years. They found that the insects share information "
    "about food with a dance that tells the others where to fly and how far to go. This discovery changed the way "
    "that people think about animal communication, and it has led to new work on the minds of small creatures.",
    "中共中央总书记、国家主席江泽民发表新年讲话，向全国各族人民致以祝贺。过去的一年，我国改革开放和现代化建设取得了"
    "重大成就，国民经济保持了快速增长，人民生活水平继续提高。新的一年里，我们要继续努力，开创新的局面。",
]
RECORDS = [{"id": i, "text": t, "meta": {"lang": "x"}} for i, t in enumerate(PROSE)] + [
    {"id": 3, "text": PROSE[0].replace("long", "LONG")},  # duplicate after normalisation
    {"id": 4, "text": "tiny"},
    {"id": 5},  # missing text
]


def _write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.exists() else {}


def _clean(*args) -> int:
    return llmsys(["clean", *map(str, args)])


def test_jsonl_in_jsonl_out_with_report(tmp_path, capsys):
    src = _write_jsonl(tmp_path / "in.jsonl", RECORDS)
    out = tmp_path / "out"
    assert _clean("--input", src, "--output", out, "--recipe", "gopher") == 0
    printed = capsys.readouterr().out
    assert "documents in" in printed and "input.missing" in printed
    assert sorted(p.name for p in out.iterdir()) == ["data.jsonl", "report.json"]
    rows = [json.loads(line) for line in (out / "data.jsonl").read_text("utf-8").splitlines()]
    assert [r["id"] for r in rows] == [0, 1, 2]
    assert list(rows[0]) == ["id", "text", "meta"] and rows[0]["meta"] == {"lang": "x"}
    assert "，" not in rows[2]["text"] and "。" in rows[2]["text"]  # NFKC, Chinese kept whole
    report = json.loads((out / "report.json").read_text())
    assert report["documents_in"] == 6 and report["documents_out"] == 3
    assert report["documents_in"] == report["documents_out"] + sum(report["dropped"].values())
    assert report["dropped"]["exact_dedup.duplicate"] == 1 and report["dropped"]["input.missing"] == 1
    assert report["characters_in"] == sum(len(r.get("text", "")) for r in RECORDS)
    assert report["characters_out"] == sum(len(r["text"]) for r in rows)
    assert report["drop_examples"]["exact_dedup.duplicate"][0]["index"] == 3
    assert not list(tmp_path.glob(".out.*"))  # no staging leftovers


def test_output_is_deterministic(tmp_path):
    src = _write_jsonl(tmp_path / "in.jsonl", RECORDS)
    assert _clean("--input", src, "--output", tmp_path / "a", "--recipe", "fineweb-like") == 0
    assert _clean("--input", src, "--output", tmp_path / "b", "--recipe", "fineweb-like", "--num-proc", "2") == 0
    assert _snapshot(tmp_path / "a") == _snapshot(tmp_path / "b")


def test_text_files_per_file_and_per_line_and_parquet_output(tmp_path):
    docs = [tmp_path / f"doc{i}.txt" for i in range(2)]
    for path, text in zip(docs, PROSE[:2], strict=True):
        path.write_text(text + "\n", encoding="utf-8")
    assert _clean("--input", *docs, "--output", tmp_path / "files", "--recipe", "gopher", "--format", "parquet") == 0
    table = pq.read_table(tmp_path / "files" / "data.parquet")
    assert table.column_names == ["text"] and table.num_rows == 2
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(PROSE + ["", PROSE[1]]), encoding="utf-8")
    assert _clean("--input", lines, "--lines", "--output", tmp_path / "lines", "--recipe", "gopher") == 0
    report = json.loads((tmp_path / "lines" / "report.json").read_text())
    assert report["documents_in"] == 4 and report["documents_out"] == 3  # blank line skipped, one duplicate


def test_parquet_and_saved_dataset_input_with_text_field(tmp_path):
    ds = Dataset.from_dict({"body": PROSE, "n": [1, 2, 3]})
    ds.to_parquet(str(tmp_path / "in.parquet"))
    ds.save_to_disk(str(tmp_path / "saved"))
    for source, name in ((tmp_path / "in.parquet", "p"), (tmp_path / "saved", "s")):
        assert _clean("--input", source, "--text-field", "body", "--output", tmp_path / name, "--recipe", "gopher") == 0
        rows = [json.loads(x) for x in (tmp_path / name / "data.jsonl").read_text("utf-8").splitlines()]
        assert [r["n"] for r in rows] == [1, 2, 3] and list(rows[0]) == ["body", "n"]


def test_folder_of_data_files_goes_through_load_dataset(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    _write_jsonl(folder / "part-0.jsonl", [{"text": PROSE[0]}, {"text": PROSE[2]}])
    _write_jsonl(folder / "part-1.jsonl", [{"text": PROSE[1]}])
    assert _clean("--input", folder, "--output", tmp_path / "out", "--recipe", "gopher") == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["documents_in"] == 3 and report["documents_out"] == 3


def test_streaming_gives_the_same_files(tmp_path):
    src = _write_jsonl(tmp_path / "in.jsonl", RECORDS)
    assert _clean("--input", src, "--output", tmp_path / "a", "--recipe", "gopher") == 0
    assert _clean("--input", src, "--output", tmp_path / "b", "--recipe", "gopher", "--streaming") == 0
    assert _snapshot(tmp_path / "a") == _snapshot(tmp_path / "b")
    for name, extra in (("c", []), ("d", ["--streaming"])):
        assert (
            _clean("--input", src, "--output", tmp_path / name, "--recipe", "gopher", "--format", "parquet", *extra)
            == 0
        )
    tables = [pq.read_table(tmp_path / name / "data.parquet").to_pylist() for name in "cd"]
    assert tables[0] == tables[1] and [r["id"] for r in tables[0]] == [0, 1, 2]
    assert json.loads((tmp_path / "d" / "report.json").read_text())["output_file"] == "data.parquet"


FLAT = [
    {"id": i, "text": PROSE[i % 3] if i % 5 else PROSE[0].replace("long", "LONG"), "score": i / 2 if i % 2 else i}
    for i in range(12)
] + [{"id": 12, "text": "tiny"}, {"id": 13, "source": "no text"}]


def test_streaming_json_lines_are_read_lazily_with_the_in_memory_table(tmp_path, monkeypatch):
    """Flat JSON Lines files stream: the features equal the in-memory reader's (fields unioned in first-seen
    order, ints and floats in one float64 column), rows are produced on demand, one shard per file, and
    `llmsys clean --streaming` writes the files the in-memory run writes."""
    from datasets import IterableDataset

    from hf_llmsys.cleaning import json_stream

    first = _write_jsonl(tmp_path / "a.jsonl", FLAT[:7])
    second = _write_jsonl(tmp_path / "b.jsonl", FLAT[7:])
    table = files.read_files([first, second])
    stream = files.read_files([first, second], streaming=True)
    assert isinstance(stream, IterableDataset) and stream.n_shards == 2
    assert stream.features == table.features and table.features["score"].dtype == "float64"
    read = []
    real = json_stream.json_lines_records

    def counting(path):
        for item in real(path):
            read.append(item)
            yield item

    monkeypatch.setattr(json_stream, "json_lines_records", counting)
    rows = iter(stream)
    assert next(rows) == table[0] and len(read) == 1  # one record read for one row, not the file
    assert [next(rows) for _ in range(len(table) - 1)] == [table[i] for i in range(1, len(table))]
    monkeypatch.undo()
    for name, extra in (("memory", []), ("stream", ["--streaming"])):
        assert _clean("--input", first, second, "--output", tmp_path / name, "--recipe", "fineweb-like", *extra) == 0
    assert _snapshot(tmp_path / "memory") == _snapshot(tmp_path / "stream")
    assert json.loads((tmp_path / "stream" / "report.json").read_text())["documents_in"] == len(FLAT)


def test_streaming_json_lines_fail_on_bad_input_before_cleaning(tmp_path, capsys):
    """The checking pass raises the in-memory reader's errors, and nothing is written."""
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"text": "x", "year": 1999}\n\n{"text": "y", "year": "MCMXCIX"}\n', encoding="utf-8")
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"text": "fine"}\n{"text": "caf\xe9"}\n')
    no_text = _write_jsonl(tmp_path / "no_text.jsonl", [{"body": "x"}])
    cases = [
        (mixed, f"{mixed}:3: field 'year' holds a JSON string here but a number at {mixed}:1"),
        (latin, "invalid byte 0xe9 at byte offset 30"),
        (no_text, "has no field 'text'"),
    ]
    for src, message in cases:
        with pytest.raises(ValueError) as memory:
            files.read_files([src])
        with pytest.raises(ValueError) as streamed:
            files.read_files([src], streaming=True)
        assert message in str(streamed.value) and str(streamed.value) == str(memory.value)
        assert _clean("--input", src, "--output", tmp_path / "out", "--streaming") == 2
        assert message in capsys.readouterr().err and not (tmp_path / "out").exists()
    conflict = _write_jsonl(tmp_path / "conflict.jsonl", [{"text": "a", "m": {"k": 1}}, {"text": "b", "m": {"k": "x"}}])
    with pytest.raises(ValueError) as memory:
        files.read_files([conflict])
    with pytest.raises(ValueError) as streamed:  # a nested field changing kind: the in-memory reader's own error
        files.read_files([conflict], streaming=True)
    assert str(streamed.value) == str(memory.value) and "cannot build a table" in str(memory.value)


NESTED = [
    {"id": 0, "text": PROSE[0], "meta": {"lang": "en", "scores": [1, 2]}, "tags": []},
    {"id": 1, "text": PROSE[1], "meta": {"scores": [0.5], "source": {"url": "a", "year": 2001}}, "tags": [{"k": "x"}]},
    {"id": 2, "text": PROSE[2], "meta": None, "tags": [{"k": "y", "w": 3}, {"w": 2.5}]},
    {"id": 3, "text": "tiny", "meta": {"lang": "zh"}},
    {"id": 4, "text": PROSE[0].replace("long", "LONG"), "tags": None},
    {"id": 5, "note": "no text"},
]


def test_streaming_json_arrays_and_nested_records_are_read_lazily_with_the_in_memory_table(tmp_path, monkeypatch):
    """A JSON array file streams element by element and nested records stream too: the features (objects
    unioned, array elements merged, ints widened to floats) and every row (absent sub-fields None) equal the
    in-memory reader's, also when records are cut at the reader's chunk ends; one element is parsed for one
    row; `llmsys clean --streaming` writes the files the in-memory run writes."""
    from datasets import IterableDataset

    from hf_llmsys.cleaning import json_array, json_stream

    array = tmp_path / "a.json"
    array.write_text(json.dumps(NESTED[:3] * 20, indent=2, ensure_ascii=False), encoding="utf-8")
    lines = _write_jsonl(tmp_path / "b.jsonl", NESTED[3:])
    table = files.read_files([array, lines])
    assert table.features["tags"].feature["w"].dtype == "float64" and list(table.features["meta"]) == [
        "lang",
        "scores",
        "source",
    ]
    for chunk in (json_array.CHUNK_CHARS, 7):  # 7 characters: every record is cut by chunk ends
        monkeypatch.setattr(json_array, "CHUNK_CHARS", chunk)
        stream = files.read_files([array, lines], streaming=True)
        assert isinstance(stream, IterableDataset) and stream.n_shards == 2
        assert stream.features == table.features
        assert list(stream) == [table[i] for i in range(len(table))]
    first, parsed = _rows_read_per_next(stream, monkeypatch, json_stream, "json_array_records")
    assert first == table[0] and parsed == 1
    for name, extra in (("memory", []), ("stream", ["--streaming"])):
        assert _clean("--input", array, lines, "--output", tmp_path / name, "--recipe", "gopher", *extra) == 0
    assert _snapshot(tmp_path / "memory") == _snapshot(tmp_path / "stream")
    assert json.loads((tmp_path / "stream" / "report.json").read_text())["documents_in"] == len(table)


@pytest.mark.parametrize(
    "content, message",
    [
        (b'[{"text": "a"}, {"text": "b"', "is not valid JSON: Expecting ',' delimiter"),
        (b'[{"text": "a"}] {"text": "b"}', "is not valid JSON: Extra data at line 1 column 17"),
        (b'[{"text": "a"}, 12345, {"text": "b"}]', "record 2 is not a JSON object"),
        (b'[{"text": "a"}, {"text": "caf\xe9"}]', "invalid byte 0xe9 at byte offset 29"),
        (b'[{"text": "a"}, {"text": 7}]', "record 2: field 'text' holds a JSON number"),
        (b"[]", "no documents in"),
    ],
    ids=["truncated", "extra-data", "not-an-object", "latin1", "number-text", "empty"],
)
def test_streaming_json_arrays_fail_as_in_memory(content, message, tmp_path, monkeypatch, capsys):
    """A malformed JSON array gives the in-memory reader's error word for word, whatever the chunk size, and
    nothing is written."""
    from hf_llmsys.cleaning import json_array

    src = tmp_path / "bad.json"
    src.write_bytes(content)
    with pytest.raises(ValueError) as memory:
        files.read_files([src])
    for chunk in (json_array.CHUNK_CHARS, 3):
        monkeypatch.setattr(json_array, "CHUNK_CHARS", chunk)
        with pytest.raises(ValueError) as streamed:
            files.read_files([src], streaming=True)
        assert message in str(memory.value) and str(streamed.value) == str(memory.value)
    assert _clean("--input", src, "--output", tmp_path / "out", "--streaming") == 2
    assert message in capsys.readouterr().err and not (tmp_path / "out").exists()


def _rows_read_per_next(stream, monkeypatch, module, name):
    """Wrap ``module.name`` (an iterator factory) to count the items it yields; return (first row, count)."""
    read = []
    real = getattr(module, name)

    def counting(*args, **kwargs):
        for item in real(*args, **kwargs):
            read.append(item)
            yield item

    monkeypatch.setattr(module, name, counting)
    first = next(iter(stream))
    monkeypatch.undo()
    return first, len(read)


def test_streaming_text_files_are_read_lazily_as_in_memory(tmp_path, monkeypatch):
    """Text files stream, a document per file or (--lines) per non-blank line split as str.splitlines splits
    the whole file (CRLF, a lone CR, U+2028, a BOM); one shard per file; the cleaned files equal the in-memory
    run's."""
    from datasets import IterableDataset

    from hf_llmsys.cleaning import file_stream

    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_bytes(("\ufeff" + "\n".join(PROSE) + "\r\n\n   \n" + PROSE[0] + "\rx\u2028y").encode("utf-8"))
    second.write_text(PROSE[1] + "\n" + PROSE[0].replace("long", "LONG") + "\n", encoding="utf-8")
    for lines in (False, True):
        table = files.read_files([first, second], lines=lines)
        stream = files.read_files([first, second], lines=lines, streaming=True)
        assert isinstance(stream, IterableDataset) and stream.n_shards == 2
        assert stream.features == table.features
        assert list(stream) == list(table)
    assert len(table) == 8 and table[4]["text"] == "x" and table[5]["text"] == "y"
    stream = files.read_files([first, second], lines=True, streaming=True)
    row, read = _rows_read_per_next(stream, monkeypatch, file_stream, "decoded_lines")
    assert row == {"text": PROSE[0]} and read == 1  # one line read for one row, not the file
    docs = [first, second]
    for name, extra in (("memory", []), ("stream", ["--streaming"])):
        code = _clean("--input", *docs, "--lines", "--output", tmp_path / name, "--recipe", "fineweb-like", *extra)
        assert code == 0
    assert _snapshot(tmp_path / "memory") == _snapshot(tmp_path / "stream")


def test_streaming_parquet_files_are_read_by_batch_with_the_in_memory_schema(tmp_path, monkeypatch):
    """Parquet files stream one record batch at a time with the schema the in-memory table has (columns
    unioned, absent ones null); the footers alone are checked first; the cleaned files equal the in-memory
    run's."""
    import pyarrow as pa
    from datasets import IterableDataset

    from hf_llmsys.cleaning import file_stream

    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.Table.from_pylist(FLAT[:12]), first, row_group_size=4)
    pq.write_table(pa.table({"text": ["tiny", None, PROSE[2]], "lang": ["en", None, "zh"]}), second)
    table = files.read_files([first, second])
    stream = files.read_files([first, second], streaming=True)
    assert isinstance(stream, IterableDataset) and stream.n_shards == 2
    assert stream.features == table.features and list(table.features) == ["id", "text", "score", "lang"]
    assert list(stream) == list(table) and table[14]["lang"] == "zh" and table[0]["lang"] is None
    monkeypatch.setattr(file_stream, "PARQUET_BATCH_ROWS", 2)
    stream = files.read_files([first, second], streaming=True)
    batches = []
    real = pq.ParquetFile.iter_batches

    def counting(self, *args, **kwargs):
        for batch in real(self, *args, **kwargs):
            batches.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counting)
    assert next(iter(stream)) == table[0] and batches == [2]  # one batch of 2 rows read for one row
    monkeypatch.undo()
    for name, extra in (("memory", []), ("stream", ["--streaming"])):
        assert _clean("--input", first, second, "--output", tmp_path / name, "--recipe", "fineweb-like", *extra) == 0
    assert _snapshot(tmp_path / "memory") == _snapshot(tmp_path / "stream")


def test_streaming_text_and_parquet_fail_on_bad_input_before_cleaning(tmp_path, capsys):
    """The checking pass (every text byte decoded; parquet footers) raises the in-memory reader's errors."""
    import pyarrow as pa

    from hf_llmsys.data.json_lines import decoded_lines

    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"fine\n" * 1000 + b"caf\xe9\n")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n", encoding="utf-8")
    not_parquet = tmp_path / "broken.parquet"
    not_parquet.write_bytes(b"PAR1 this is not parquet")
    numbers, strings = tmp_path / "n.parquet", tmp_path / "s.parquet"
    pq.write_table(pa.table({"text": ["a"], "year": [1999]}), numbers)
    pq.write_table(pa.table({"text": ["b"], "year": ["MCMXCIX"]}), strings)
    no_text = tmp_path / "no_text.parquet"
    pq.write_table(pa.table({"body": ["x"]}), no_text)
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), empty)
    cases = [
        ([latin], False, "invalid byte 0xe9 at byte offset 5003"),
        ([blank], True, "no documents in"),
        ([not_parquet], False, "cannot read parquet file"),
        ([numbers, strings], False, "have incompatible schemas"),
        ([no_text], False, "has no field 'text'"),
        ([empty], False, "no documents in"),
    ]
    for paths, lines, message in cases:
        with pytest.raises(ValueError) as memory:
            files.read_files(paths, lines=lines)
        with pytest.raises(ValueError) as streamed:
            files.read_files(paths, lines=lines, streaming=True)
        assert message in str(streamed.value) and message in str(memory.value)
        flags = ["--lines"] if lines else []
        assert _clean("--input", *paths, *flags, "--output", tmp_path / "out", "--streaming") == 2
        assert message in capsys.readouterr().err and not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match=f"cannot read {tmp_path}: Is a directory"):
        next(decoded_lines(tmp_path))


# ----------------------------------------------------------------------------------------------- bad input


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[list, str]]:
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("café au lait\n".encode("latin-1"))
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"text": "ok"}\n{"text": broken\n', encoding="utf-8")
    no_field = _write_jsonl(tmp_path / "nofield.jsonl", [{"body": "x"}])
    good = _write_jsonl(tmp_path / "good.jsonl", RECORDS)
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("steps:\n  - step: html\n  - step: dedupe\n")
    threshold = tmp_path / "threshold.json"
    threshold.write_text(json.dumps([{"step": "noise", "max_digit_ratio": 1.5}]))
    return {
        "encoding": ([latin1], r"not UTF-8 text \(invalid byte 0xe9 at byte offset 3\)"),
        "json": ([bad_json], r"bad.jsonl:2 is not valid JSON"),
        "field": ([no_field], r"has no field 'text'"),
        "missing file": ([tmp_path / "nope.jsonl"], r"nope.jsonl does not exist"),
        "directory": ([tmp_path], r"cannot load dataset .*JSON parse error"),  # a folder with a broken file
        "unknown step": ([good, "--recipe", unknown], r"unknown step 'dedupe'; known steps: .*exact_dedup"),
        "threshold": ([good, "--recipe", threshold], r"step 'noise': parameter 'max_digit_ratio' = 1.5"),
        "recipe": ([good, "--recipe", "c5"], r"unknown recipe 'c5'"),
    }


@pytest.mark.parametrize(
    "case", ["encoding", "json", "field", "missing file", "directory", "unknown step", "threshold", "recipe"]
)
def test_bad_input_is_a_clear_error_and_leaves_the_output_untouched(case, tmp_path, capsys):
    args, message = _bad_inputs(tmp_path)[case]
    out = tmp_path / "out"
    out.mkdir()
    (out / "previous.jsonl").write_text("old\n")
    before = _snapshot(out)
    code = _clean("--input", *args, "--output", out, "--overwrite")
    err = capsys.readouterr().err
    assert code == 2 and err.splitlines()[-1].startswith("llmsys clean: error: ")  # after any progress bars
    assert re.search(message, err), err
    assert _snapshot(out) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def test_failure_while_writing_leaves_the_output_untouched(tmp_path, monkeypatch):
    src = _write_jsonl(tmp_path / "in.jsonl", RECORDS)
    out = tmp_path / "out"
    out.mkdir()
    (out / "data.jsonl").write_text("previous run\n")

    def disk_full(dataset, folder, fmt):
        (folder / "data.jsonl").write_text("half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("hf_llmsys.cleaning.job.write_documents", disk_full)
    assert _clean("--input", src, "--output", out, "--overwrite", "--recipe", "gopher") == 2  # a one-line CLI error
    assert _snapshot(out) == {"data.jsonl": b"previous run\n"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def test_non_empty_output_needs_overwrite(tmp_path, capsys):
    src = _write_jsonl(tmp_path / "in.jsonl", RECORDS)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    assert _clean("--input", src, "--output", out) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert _clean("--input", src, "--output", out, "--overwrite", "--recipe", "gopher") == 0
    assert sorted(p.name for p in out.iterdir()) == ["data.jsonl", "report.json"]


def test_files_reader_unions_fields(tmp_path):
    src = _write_jsonl(tmp_path / "in.jsonl", [{"text": "a"}, {"text": "b", "extra": 1}])
    ds = files.read_files([src])
    assert ds.column_names == ["text", "extra"] and ds["extra"] == [None, 1]


def test_mixed_type_text_field_names_the_file_and_line(tmp_path, capsys):
    lines = ['{"text": "a page"}', '{"text": "another page"}', "", '{"text": 42}', '{"text": "a last page"}']
    src = tmp_path / "mixed.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{re.escape(str(src))}:4: field 'text' holds a JSON number \(42\)"):
        files.read_files([src])
    other = tmp_path / "other.jsonl"
    other.write_text('{"text": "x", "year": 1999}\n{"text": "y", "year": "MCMXCIX"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=rf"{re.escape(str(other))}:2: field 'year' holds a JSON string here but a "
                                         rf"number at {re.escape(str(other))}:1"):  # fmt: skip
        files.read_files([other])
    out = tmp_path / "out"
    assert _clean("--input", src, "--output", out) == 2
    assert f"{src}:4: field 'text'" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("recipe", ["c4", "gopher", "fineweb-like"])
@pytest.mark.parametrize("extra", [[], ["--streaming"], ["--format", "parquet"]], ids=["jsonl", "streaming", "parquet"])
def test_every_document_dropped_is_an_empty_result_not_an_error(recipe, extra, tmp_path, capsys):
    src = _write_jsonl(tmp_path / "in.jsonl", [{"text": "Hi there."}] * 20)
    out = tmp_path / "out"
    assert _clean("--input", src, "--output", out, "--recipe", recipe, *extra) == 0
    fmt = "parquet" if "parquet" in extra else "jsonl"
    assert sorted(p.name for p in out.iterdir()) == [f"data.{fmt}", "report.json"]
    if fmt == "parquet":
        table = pq.read_table(out / "data.parquet")
        assert table.num_rows == 0 and table.column_names == ["text"]
    else:
        assert (out / "data.jsonl").read_text() == ""
    report = json.loads((out / "report.json").read_text())
    assert report["documents_in"] == 20 and report["documents_out"] == 0
    assert sum(report["dropped"].values()) == 20
    assert "wrote 0 documents" in capsys.readouterr().out


def test_a_recipe_naming_a_backend_that_is_not_installed_is_refused_naming_the_install(tmp_path, monkeypatch, capsys):
    """`backend: langid` without the langid package: one line naming the pip command, before any document."""
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "langid" else real_find_spec(name, *a)
    )
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("steps:\n  - step: language\n    backend: langid\n")
    good = _write_jsonl(tmp_path / "good.jsonl", RECORDS)
    out = tmp_path / "out"
    assert _clean("--input", good, "--output", out, "--recipe", recipe) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("llmsys clean: error: ") and "needs the langid package" in err
    assert "pip install 'hf-llmsys[langid]'" in err and not out.exists()
