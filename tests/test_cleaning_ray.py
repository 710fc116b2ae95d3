"""The Ray Data engine gives the datasets engine's answer: same documents, same text, same per-rule counts and
examples; the same across worker and block counts and with a worker SIGKILLed mid-run; clear errors for bad input.

One local Ray cluster for the module (2 CPUs, 127.0.0.1, no dashboard), shut down at the end.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
from datasets import Dataset

from hf_llmsys.cleaning import clean
from hf_llmsys.cleaning.base import CorpusStep, Document, DocumentStep
from hf_llmsys.cleaning.engine_ray import INDEX
from hf_llmsys.cleaning.minhash import MinHashDedup
from hf_llmsys.cleaning.perplexity_filter import PerplexityFilter
from hf_llmsys.cleaning.ray_cluster import check_workers_import
from hf_llmsys.cleaning.ray_corpus import CHILD, PARENT, _group_kwargs, connected_components, inverted_cdf_rank
from hf_llmsys.cleaning.text import guess_language
from hf_llmsys.cli import main as llmsys

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

from test_cleaning_pipeline import EN_PROSE, ZH_PROSE, build_tiny_lm  # noqa: E402

SENTENCES = [
    "The river rises in the hills and runs down to the sea.",
    "Boats carry grain to the port every week of the year.",
    "Traders meet them there and talk about the weather.",
    "The old bridge was built of stone three hundred years ago.",
    "Children swim in the shallow water near the mill in summer.",
]
NEAR_COPY = EN_PROSE[2].replace("engineering", "medicine")  # one word changed: a MinHash near-duplicate
TEXTS = [
    *EN_PROSE,
    "<p>" + EN_PROSE[0] + "</p>",  # exact duplicate after html
    EN_PROSE[1].upper(),  # exact duplicate after normalisation
    NEAR_COPY,
    "\n".join([SENTENCES[0]] * 60),  # one line repeated: dropped by C4's line dedup
    "\n".join(SENTENCES[:4]),  # lines shared with the next page
    "\n".join(SENTENCES[2:] + ["A new closing line makes this page a little longer than the other one."]),
    ZH_PROSE,
    "",
    None,
    "Le gouvernement a présenté son budget pour l'année prochaine devant le parlement. Les députés en débattront "
    "pendant trois semaines avant le vote final. Le ministre a défendu ses choix devant la presse ce matin.",
]
RECIPE = [
    {"step": "html"},
    {"step": "normalize"},
    {"step": "whitespace"},
    {"step": "length"},
    {"step": "exact_dedup"},
    {"step": "minhash"},
    {"step": "c4", "languages": ["en", "zh"]},
    {"step": "c4_lines"},
    {"step": "c4_spans"},
    {"step": "language", "languages": ["en"], "min_score": 0.9, "backend": "langid"},
]


@pytest.fixture(scope="module")
def ray_session(tmp_path_factory):
    if ray.is_initialized():
        ray.shutdown()
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("ray"))  # workers put the driver's folder first on sys.path: not the checkout
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    finally:
        os.chdir(cwd)
    yield
    ray.shutdown()


def _corpus(texts=TEXTS) -> Dataset:
    return Dataset.from_dict({"text": list(texts), "id": list(range(len(texts)))})


def _rows(result) -> list[dict]:
    return result.dataset.take_all() if hasattr(result.dataset, "take_all") else list(result.dataset)


def _same_answer(ray_result, reference) -> None:
    assert _rows(ray_result) == _rows(reference)
    assert ray_result.report.to_dict() == reference.report.to_dict()


def test_inverted_cdf_rank_is_numpys():
    rng = random.Random(0)
    for _ in range(300):
        n, q = rng.randint(1, 50), rng.choice([0.1, 0.25, 0.5, 0.8, 0.9, 1.0, rng.random() or 0.5])
        values = np.arange(n, dtype=float)
        assert inverted_cdf_rank(n, q) == np.quantile(values, q, method="inverted_cdf")


def test_ray_engine_equals_datasets_engine_on_every_corpus_step(ray_session):
    model, tokenizer = build_tiny_lm()
    recipe = RECIPE + [PerplexityFilter(model, tokenizer, quantile=0.5)]
    reference = clean(_corpus(), recipe)
    report = reference.report.to_dict()["dropped"]
    for rule in ("c4_lines.too_few_sentences", "exact_dedup.duplicate", "minhash.near_duplicate",
                 "perplexity.above_quantile", "input.missing", "language.other"):  # fmt: skip
        assert report.get(rule, 0) >= 1, rule  # the corpus exercises every corpus step
    two_workers = clean(_corpus(), recipe, engine="ray", num_proc=2, batch_size=2)
    _same_answer(two_workers, reference)
    one_worker = clean(_corpus(), recipe, engine="ray", num_proc=1, batch_size=5)  # other blocks, other tasks
    _same_answer(one_worker, reference)


def test_connected_components_keep_each_components_smallest_document(ray_session):
    rng = random.Random(3)
    step = MinHashDedup(bands=2, rows=1)
    features = [[rng.randrange(12), rng.randrange(12)] for _ in range(40)]  # chains and bridges between buckets
    expected = {i for i, d in enumerate(step.decide(features)) if d is not None}
    links = []
    for band in range(2):
        buckets: dict[int, list[int]] = {}
        for doc, keys in enumerate(features):
            buckets.setdefault(keys[band], []).append(doc)
        links += [{CHILD: m, PARENT: members[0]} for members in buckets.values() for m in members[1:]]
    from hf_llmsys.cleaning.engine_ray import RayRun

    run = RayRun("text", 8, 2, {})
    assert _group_kwargs(run)["batch_format"] == "pyarrow"
    roots = connected_components(ray.data.from_items(links), run).take_all()
    assert {r[CHILD] for r in roots} == expected
    first_of = {}
    for doc in range(40):  # union-find reference for each document's root
        first_of[doc] = doc
    for link in links:
        a, b = link[CHILD], link[PARENT]
        while first_of[a] != a:
            a = first_of[a]
        while first_of[b] != b:
            b = first_of[b]
        first_of[max(a, b)] = min(a, b)

    def root(doc):
        while first_of[doc] != doc:
            doc = first_of[doc]
        return doc

    assert all(r[PARENT] == root(r[CHILD]) for r in roots)


class KillWorkerOnce(DocumentStep):
    """Kills its own worker process (SIGKILL) the first time it sees a document, on any worker."""

    name = "kill_once"

    def __init__(self, marker: str):
        self.marker = marker

    def apply(self, doc: Document):
        if not os.path.exists(self.marker):
            Path(self.marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return None


def test_a_worker_killed_mid_run_does_not_change_the_output(ray_session, tmp_path):
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers need not import this test module
    marker = tmp_path / "killed"
    recipe = [{"step": "html"}, {"step": "length"}, {"step": "exact_dedup"}]
    reference = clean(_corpus(), recipe)
    killed = clean(_corpus(), [KillWorkerOnce(str(marker)), *recipe], engine="ray", num_proc=2, batch_size=2)
    assert marker.exists()  # a worker did die
    assert _rows(killed) == _rows(reference)
    assert killed.report.dropped == reference.report.dropped


class ScriptedCorpusStep(CorpusStep):
    """A corpus step with no distributed implementation."""

    name = "scripted"

    def features(self, texts):
        return [len(t) for t in texts]


def _write_jsonl(path: Path, texts) -> Path:
    records = [{"id": i, "text": t} for i, t in enumerate(texts) if t is not None] + [{"id": 99}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def test_cli_engine_ray_writes_the_datasets_engines_documents_and_report(ray_session, tmp_path):
    src = _write_jsonl(tmp_path / "in.jsonl", TEXTS)
    base = ["clean", "--input", str(src), "--recipe", "c4", "--batch-size", "3"]
    assert llmsys([*base, "--output", str(tmp_path / "ref")]) == 0
    assert llmsys([*base, "--output", str(tmp_path / "ray"), "--engine", "ray", "--num-proc", "2"]) == 0
    shards = sorted((tmp_path / "ray").glob("part-*.jsonl"))
    assert shards and "".join(p.read_text("utf-8") for p in shards) == (tmp_path / "ref" / "data.jsonl").read_text()
    ours, theirs = (json.loads((tmp_path / d / "report.json").read_text()) for d in ("ray", "ref"))
    assert ours.pop("output_files") == [p.name for p in shards] and theirs.pop("output_file") == "data.jsonl"
    assert ours == theirs
    parquet = tmp_path / "ray-parquet"
    folder = tmp_path / "crawl"  # a folder input: its files, in name order
    folder.mkdir()
    src = src.rename(folder / "in.jsonl")
    args = ["clean", "--input", str(folder), "--output", str(parquet), "--engine", "ray", "--format", "parquet"]
    assert llmsys(args) == 0
    import pyarrow.parquet as pq

    table = pq.read_table(sorted(parquet.glob("part-*.parquet")))
    reference = clean(Dataset.from_json(str(src)), "fineweb-like")  # the CLI's default recipe
    assert table.column_names == ["id", "text"] and table.to_pylist() == list(reference.dataset)


def test_bad_input_gives_clear_errors_and_leaves_the_output_untouched(ray_session, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "data.jsonl").write_text("previous run\n")
    src = _write_jsonl(tmp_path / "in.jsonl", TEXTS[:3])
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"text": "a page"}\n{"text": "another page"}\n{"text": 42}\n', encoding="utf-8")
    cases = [
        (["--input", str(mixed)], f"{mixed}:3: field 'text' holds a JSON number (42), not text"),
        (["--input", str(src), "--address", "127.0.0.1:1"], "cannot reach a Ray cluster at 127.0.0.1:1"),
        (["--input", str(tmp_path / "missing.jsonl")], "missing.jsonl does not exist"),
        (["--input", "file:///no/such/dir/crawl.jsonl"], "crawl.jsonl does not exist"),
        (["--input", str(src), "--recipe", json.dumps([])], "unknown recipe"),
    ]
    for args, message in cases:
        code = llmsys(["clean", "--engine", "ray", "--output", str(out), "--overwrite", *args])
        err = capsys.readouterr().err
        assert code == 2 and message in err, err
        assert sorted(p.name for p in out.iterdir()) == ["data.jsonl"]
        assert (out / "data.jsonl").read_text() == "previous run\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def test_workers_that_cannot_import_hf_llmsys_are_reported(ray_session, tmp_path, capsys):
    shadow = tmp_path / "shadow" / "hf_llmsys"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('hf_llmsys is not installed on this node')\n")
    runtime_env = {"env_vars": {"PYTHONPATH": str(shadow.parent)}}
    with pytest.raises(ValueError, match=r"Ray workers cannot import hf_llmsys.cleaning .*not installed on this node"):
        check_workers_import(runtime_env=runtime_env)
    check_workers_import()  # the plain workers can
    out = tmp_path / "out"
    src = _write_jsonl(tmp_path / "in.jsonl", TEXTS[:3])
    code = llmsys(["clean", "--engine", "ray", "--input", str(src), "--output", str(out),
                   "--ray-runtime-env", json.dumps(runtime_env)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert "Ray workers cannot import hf_llmsys.cleaning" in err and "not installed on this node" in err, err


def test_ray_options_are_checked_before_anything_runs(tmp_path, capsys):
    src = _write_jsonl(tmp_path / "in.jsonl", TEXTS[:3])
    out = tmp_path / "out"
    cases = [
        (["--engine", "ray", "--ray-object-store-mb", "10"], "--ray-object-store-mb must be >= 75"),
        (["--engine", "ray", "--ray-object-store-mb", "512", "--address", "auto"], "drop one of --ray-object-store-mb"),
        (["--ray-object-store-mb", "512"], "--ray-object-store-mb needs --engine ray"),
        (["--ray-runtime-env", "{}"], "--ray-runtime-env needs --engine ray"),
        (["--engine", "ray", "--ray-runtime-env", "{pip"], "--ray-runtime-env is not valid JSON"),
        (["--engine", "ray", "--ray-runtime-env", '["hf-llmsys"]'], "--ray-runtime-env must be a JSON object"),
    ]
    for args, message in cases:
        code = llmsys(["clean", "--input", str(src), "--output", str(out), *args])
        err = capsys.readouterr().err
        assert code == 2 and message in err, (args, err)
        assert not out.exists()


def test_a_local_cluster_gets_the_object_store_size_and_runtime_env_asked_for(monkeypatch):
    from hf_llmsys.cleaning import ray_cluster

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    ray_cluster.connect(runtime_env={"env_vars": {"A": "1"}}, object_store_memory=300 * 2**20)
    ray_cluster.connect()
    assert calls[0]["object_store_memory"] == 300 * 2**20 and calls[0]["runtime_env"] == {"env_vars": {"A": "1"}}
    assert calls[1]["object_store_memory"] is None  # Ray's default
    with pytest.raises(ValueError, match="applies to a cluster started here"):
        ray_cluster.connect("auto", object_store_memory=300 * 2**20)


def test_ray_engine_refuses_what_it_cannot_run(ray_session):
    with pytest.raises(ValueError, match="engine must be one of"):
        clean(_corpus(), "c4", engine="spark")
    with pytest.raises(ValueError, match="not text"):
        clean(Dataset.from_dict({"text": [1, 2]}), "c4", engine="ray")
    with pytest.raises(ValueError, match="takes a datasets.Dataset or a ray.data.Dataset"):
        clean(_corpus().to_iterable_dataset(), "c4", engine="ray")
    with pytest.raises(ValueError, match="no Ray implementation"):
        clean(_corpus(), [ScriptedCorpusStep()], engine="ray")
    assert INDEX not in ray.data.from_items([{"text": "a"}]).schema().names


def _real_documents(data_dir: Path, count: int) -> list[str]:
    """`count` shared-data documents (wikitext articles, Shakespeare, People's Daily, interleaved) plus near copies
    of 5% of them with 3 tokens edited: MinHash has planted near-duplicates to find."""
    wiki = (data_dir / "wikitext-2-valid.tokens").read_text(encoding="utf-8")
    articles = [a.strip() for a in re.split(r"\n(?= = [^=\n]+ = \n)", wiki) if a.strip()]
    chunked = []
    for name, size in (("tinyshakespeare.txt", 40), ("peoples_daily_1998_zh_part.txt", 8)):
        lines = (data_dir / name).read_text(encoding="utf-8").splitlines()
        chunked.append(["\n".join(lines[i : i + size]).strip() for i in range(0, len(lines), size)])
    docs = [doc for row in itertools.zip_longest(articles, *chunked) for doc in row if doc][:count]
    rng = random.Random(0)
    for i in rng.sample(range(len(docs)), max(1, len(docs) // 20)):
        chinese = guess_language(docs[i]) == "zh"
        tokens = list(docs[i]) if chinese else docs[i].split(" ")
        for pos in rng.sample(range(len(tokens)), min(3, len(tokens))):
            tokens[pos] = "变" if chinese else "edited"
        docs.append(("" if chinese else " ").join(tokens))
    return docs


@pytest.mark.slow
def test_ray_engine_equals_datasets_engine_on_real_text(ray_session, shared_data):
    docs = _real_documents(shared_data, 240)
    for recipe, corpus_rule in (("c4", "c4_lines.too_few_sentences"), ("fineweb-like", "minhash.near_duplicate")):
        reference = clean(_corpus(docs), recipe)
        assert reference.report.dropped.get(corpus_rule, 0) >= 1  # the planted copies reach a corpus step
        _same_answer(clean(_corpus(docs), recipe, engine="ray", num_proc=2), reference)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_cli_engine_ray_every_document_dropped_is_an_empty_result(ray_session, tmp_path, fmt):
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "Hi there."}\n' * 20)
    out = tmp_path / "out"
    args = ["clean", "--input", str(src), "--output", str(out), "--engine", "ray", "--format", fmt]
    assert llmsys([*args, "--recipe", "fineweb-like"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [f"part-000000000000.{fmt}", "report.json"]
    if fmt == "parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(out / "part-000000000000.parquet")
        assert table.num_rows == 0 and table.column_names == ["text"]
    else:
        assert (out / "part-000000000000.jsonl").read_text() == ""
    report = json.loads((out / "report.json").read_text())
    assert report["documents_in"] == 20 and report["documents_out"] == 0 and sum(report["dropped"].values()) == 20
    assert report["output_files"] == [f"part-000000000000.{fmt}"]


def test_cli_engine_ray_keeps_input_order_across_files_and_blocks(ray_session, tmp_path):
    from ray.data import DataContext

    rng = random.Random(5)
    texts = [" ".join(rng.sample(SENTENCES + EN_PROSE, 4)) + f" Page {i}." for i in range(120)]
    texts += texts[:10]  # exact duplicates, dropped in their later place
    files = [_write_jsonl(tmp_path / f"part-{shard}.jsonl", texts[shard::4]) for shard in range(4)]
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps(RECIPE[:6]))
    args = ["clean", "--input", *map(str, files), "--recipe", str(recipe), "--batch-size", "7"]
    assert llmsys([*args, "--output", str(tmp_path / "ref")]) == 0
    context = DataContext.get_current()
    context.execution_options.preserve_order = False  # as in a fresh session: the CLI must set it before reading
    try:
        assert llmsys([*args, "--output", str(tmp_path / "ray"), "--engine", "ray", "--num-proc", "2"]) == 0
    finally:
        context.execution_options.preserve_order = True
    ours = "".join(p.read_text("utf-8") for p in sorted((tmp_path / "ray").glob("part-*.jsonl")))
    assert ours == (tmp_path / "ref" / "data.jsonl").read_text()
    reports = [json.loads((tmp_path / d / "report.json").read_text()) for d in ("ray", "ref")]
    assert [r.pop("output_files", None) or r.pop("output_file") for r in reports]
    assert reports[0] == reports[1]


class DropOddPositions(DocumentStep):
    """Drops documents at odd input positions: a step that reads ``doc.index``."""

    name = "drop_odd_positions"
    reads_position = True

    def apply(self, doc: Document):
        assert doc.index >= 0, "the document was not numbered before a step that reads positions"
        return self.rule("odd") if doc.index % 2 else None


def test_a_step_that_reads_positions_sees_the_datasets_engines_positions(ray_session):
    """The Ray engine runs a first run of document steps before numbering (position -1), unless one of them
    declares ``reads_position``: then they see the input positions, as under the datasets engine."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    recipe = [DropOddPositions(), {"step": "length"}, {"step": "exact_dedup"}]
    reference = clean(_corpus(), recipe)
    assert reference.report.dropped["drop_odd_positions.odd"] >= 1
    got = clean(_corpus(), recipe, engine="ray", num_proc=2, batch_size=2)
    assert _rows(got) == _rows(reference)
    assert got.report.dropped == reference.report.dropped


def test_a_file_that_fails_to_parse_late_is_named_and_a_steps_error_is_not_a_read_error(ray_session, tmp_path, capsys):
    """The second file breaks only while the steps stream (after the schema came from the first): the error still
    names its file and line. Only read errors trigger that local re-read: a step's own error is raised as it is."""
    from hf_llmsys.cleaning.ray_io import is_read_error

    good = _write_jsonl(tmp_path / "a.jsonl", [f"page number {i} with some words in it." for i in range(2000)])
    bad = tmp_path / "b.jsonl"
    bad.write_text("".join(json.dumps({"text": f"other page {i}."}) + "\n" for i in range(50)) + '{"text": broken\n')
    code = llmsys(["clean", "--engine", "ray", "--input", str(good), str(bad), "--output", str(tmp_path / "out")])
    assert code == 2 and f"{bad}:51 is not valid JSON" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    try:
        json.loads("{")
    except ValueError as parse_error:
        assert is_read_error(parse_error)
    assert not is_read_error(RuntimeError("a step failed"))
