"""The Gradio demo through gradio_client against the launched app: every event, outputs checked for content
against the package's functions and independent references (transformers' T5 buckets, the ALiBi paper's
get_slopes), the limits' messages, and 20 concurrent clients on the perplexity event."""

from __future__ import annotations

import math
import os
import re
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from test_demo_support import TINY_ENCODINGS, demo_server, launch_demo, tiny_zoo  # noqa: F401  (session fixtures)

gradio_client = pytest.importorskip("gradio_client")
from gradio_client.exceptions import AppError  # noqa: E402
from paper_references import paper_get_slopes  # noqa: E402

TEXT = ("EDUCATION, n. That which discloses to the wise and disguises from the foolish their lack of "
        "understanding. A hacker is a person who enjoys exploring the details of programmable systems.")  # fmt: skip


@pytest.fixture(scope="module")
def served(demo_server):  # noqa: F811  (the imported session fixture)
    url, ctx, _ = demo_server
    client = gradio_client.Client(url, verbose=False)
    yield client, ctx
    client.close()


def frame(value: dict):
    """A gr.Dataframe / gr.LinePlot value from the client as a pandas DataFrame."""
    import pandas as pd

    if "value" in value:  # LinePlot returned as an update: {"value": {"columns", "data"}, "x_title", ...}
        value = value["value"]
    if "columns" in value:  # LinePlot: {"columns", "data", "datatypes", "mark"}
        value = {"headers": value["columns"], "data": value["data"]}
    return pd.DataFrame(value["data"], columns=value["headers"])


def assert_plot(plot: dict) -> None:
    assert plot["type"] == "matplotlib" and plot["plot"].startswith("data:image/") and len(plot["plot"]) > 2000


ENCODING_ARGS = dict(length=48, heads=8, dim=32, t5_buckets=32, t5_max_distance=64, shaw_k=4, rope_offset=777)


def show(client, encoding, **overrides):
    args = {**ENCODING_ARGS, **overrides}
    return client.predict(encoding, *args.values(), api_name="/show_encoding")


def test_encoding_views_are_named_as_the_models_name_them():
    """The tab's choices are position_embedding_type values, labelled with each encoding's card name."""
    from hf_llmsys.demo import positions_tab
    from hf_llmsys.hub.architecture import ENCODING_CARDS
    from hf_llmsys.models.positional_encodings import POSITIONAL_ENCODINGS

    choices = positions_tab.encoding_choices()
    assert [kind for _, kind in choices] == list(positions_tab.ENCODING_VIEWS)
    assert set(positions_tab.ENCODING_VIEWS) <= set(POSITIONAL_ENCODINGS)
    assert all(label == ENCODING_CARDS[kind].name for label, kind in choices)


def test_unknown_encoding_names_the_choices(served):
    with pytest.raises(
        Exception, match=r"not in the list of choices: \['sinusoidal', 'rope', 'alibi', 't5', 'relative'\]"
    ):
        show(served[0], "relative (Shaw)")  # the old label: gradio's Radio lists the registry names


@pytest.mark.parametrize("heads", [8, 6, 12])
def test_alibi_slopes_equal_the_paper_formula(served, heads):
    figure, curve, table, caption, curve_plot = show(served[0], "alibi", heads=heads)
    assert_plot(curve_plot)
    assert_plot(figure)
    slopes = frame(table)["slope m_h"].tolist()
    assert slopes == pytest.approx(paper_get_slopes(heads), rel=1e-6)
    assert sorted(frame(curve)["series"].unique()) == sorted(f"head {h}" for h in range(heads))
    assert ("not a power of two" in caption) == (heads & (heads - 1) != 0)


def test_sinusoidal_dot_product_depends_on_distance_only(served):
    figure, curve, _, _, curve_plot = show(served[0], "sinusoidal")
    assert_plot(curve_plot)
    assert_plot(figure)
    df = frame(curve)
    assert set(df["series"]) == {"i=0", "i=24"}
    a = df[df.series == "i=0"].set_index("x")["y"]
    b = df[df.series == "i=24"].set_index("x")["y"]
    common = b.index
    assert torch.allclose(torch.tensor(a[common].values), torch.tensor(b.values), atol=1e-4)
    assert a[0] == pytest.approx(16.0)  # d/2 pairs of sin^2 + cos^2


def test_rope_score_is_a_function_of_the_offset_only(served):
    figure, curve, table, caption, _ = show(served[0], "rope")
    assert_plot(figure)
    df = frame(curve)
    assert set(df["series"]) == {"n=0", "n=777"}
    a, b = (torch.tensor(df[df.series == s]["y"].values) for s in ("n=0", "n=777"))
    assert torch.allclose(a, b, atol=1e-3) and a.std() > 0.1  # not a constant curve
    theta = frame(table)["θ_i (rad / position)"].tolist()
    assert theta == pytest.approx([10000 ** (-2 * i / 32) for i in range(16)], rel=1e-5)


def test_t5_buckets_equal_transformers_t5(served):
    from transformers.models.t5.modeling_t5 import T5Attention

    figure, curve, _, _, _ = show(served[0], "t5", t5_buckets=16, t5_max_distance=64)
    assert_plot(figure)
    df = frame(curve)
    distance = torch.tensor(df["x"].values)
    reference = T5Attention._relative_position_bucket(-distance, bidirectional=False, num_buckets=16, max_distance=64)
    assert df["y"].tolist() == reference.tolist()


def test_shaw_table_clips_at_k(served):
    _, _, table, _, _ = show(served[0], "relative", shaw_k=4)
    df = frame(table)
    expected = [min(max(d, -4), 4) + 4 for d in df["j - i"]]
    assert df["table row"].tolist() == expected


def test_permutation_nope_first_layer_is_order_invariant_rope_is_not(served):
    table, note = served[0].predict("床前明月", "前床明月", api_name="/permutation")
    assert "same tokens in another order" in note
    df = frame(table).set_index(["model", "layers"])
    nope, rope = df.loc[("NoPE", 1), "total variation"], df.loc[("RoPE", 1), "total variation"]
    assert nope < 1e-6
    assert rope > 10 * nope + 1e-7


def test_perplexity_rows_per_token_and_figures_equal_the_toolkit(served):
    from hf_llmsys.evaluation.perplexity import corpus_perplexity

    client, ctx = served
    coloured, tokens, summary = client.predict(TEXT, False, api_name="/perplexity")
    zoo = ctx.zoo.zoo
    n_tokens = len(zoo.tokenizer(TEXT, add_special_tokens=False)["input_ids"])
    tokens, summary = frame(tokens), frame(summary)
    assert len(tokens) == n_tokens and list(tokens.columns) == ["position", "token", *TINY_ENCODINGS]
    assert "".join(tokens["token"]) == TEXT
    assert coloured.count('class="surprisal-row"') == len(TINY_ENCODINGS)
    for name in TINY_ENCODINGS:
        expected = corpus_perplexity(zoo.models[name], zoo.tokenizer, TEXT, max_length=zoo.train_length,
                                     stride=zoo.train_length // 2)  # fmt: skip
        row = summary.set_index("model").loc[name]
        assert row["token ppl"] == pytest.approx(expected.ppl, rel=1e-5)
        assert row["bits per byte"] == pytest.approx(expected.bits_per_byte, rel=1e-5)
        assert tokens[name].sum() == pytest.approx(expected.nll / math.log(2), rel=1e-5)


def test_zoo_curves_and_paper_table(served):
    import json

    from hf_llmsys.demo.perplexity_tab import zoo_figure
    from hf_llmsys.plots import legend_labels, legend_texts

    client, ctx = served
    zoo_curve, paper = client.predict(api_name="/zoo_curves")
    assert_plot(zoo_curve)  # a matplotlib picture: its legend is checked where it is built
    report = json.loads((ctx.zoo.zoo.folder / "zoo.json").read_text())
    runs = [run["name"] for run in report["runs"]]
    assert "rope+yarn" in runs
    figure = zoo_figure(report)
    assert legend_labels(figure) == legend_texts(figure) == [runs]  # every line drawn and named in the legend
    for line, run in zip(figure.axes[0].get_lines(), report["runs"], strict=True):
        assert list(line.get_ydata()) == [r["ppl"] for r in run["results"] if r["ppl"] is not None]
    paper = frame(paper)
    assert set(paper["series"]) == {"sinusoidal", "rotary", "T5 bias", "ALiBi"}
    assert paper[paper.series == "ALiBi"]["y"].tolist() == [19.73, 18.73, 18.41, 18.34, 18.31]
    assert len(paper[paper.series == "T5 bias"]) == 4  # out of memory at 15512


def test_rope_scaling_past_the_training_context(served):
    from hf_llmsys.evaluation.perplexity import corpus_perplexity

    client, ctx = served
    zoo = ctx.zoo.zoo
    df = frame(client.predict(TEXT, "yarn", 32, api_name="/rope_scaling"))
    assert set(df["rope scaling"]) == {"none (trained RoPE)", "yarn x2"} and set(df["context"]) == {16, 32}
    expected = corpus_perplexity(zoo.rope_with_scaling("yarn", 2.0), zoo.tokenizer, TEXT, max_length=32, stride=32)
    row = df[(df["rope scaling"] == "yarn x2") & (df["context"] == 32)].iloc[0]
    assert row["token ppl"] == pytest.approx(expected.ppl, rel=1e-5)


def test_sparse_layouts_keys_and_memory(served):
    """Keys per query from the layouts; memory measured for four implementations of each layout, against the
    Sparse Transformer's accounting derived beside it."""
    from hf_llmsys.layout_views import attended_counts

    figure, keys, measured, derived, bench_note, bench = served[0].predict(256, 8, 16, 2, 4, 16, api_name="/sparse")
    assert_plot(figure)
    keys = frame(keys).set_index("layout")
    assert keys.loc["dense", "max keys per query"] == 256
    local = attended_counts("local", 256, num_heads=4, sliding_window=16)
    assert keys.loc["local", "mean keys per query"] == pytest.approx(float(local.float().mean()))
    measured, derived = frame(measured).set_index("layout"), frame(derived).set_index("layout")
    qkv_mb, probs_mb = 3 * 4 * 256 * 16 * 4 / 2**20, 4 * 256 * 256 * 4 / 2**20
    assert derived["q, k, v"].tolist() == pytest.approx([qkv_mb] * 4)
    assert derived["S x S probabilities"].tolist() == pytest.approx([probs_mb] * 4)
    assert derived.loc["local", "kept-pair probabilities"] == pytest.approx(int(local.sum()) * 4 / 2**20)
    # masked dense keeps q, k, v and the S x S probabilities, whatever the layout; recomputation keeps q, k, v
    assert measured["masked dense"].tolist() == pytest.approx([qkv_mb + probs_mb] * 4)
    assert measured["kept blocks + recompute"].tolist() == pytest.approx([qkv_mb] * 4)
    for kind in ("local", "strided"):  # the kept blocks' probabilities shrink with the layout
        assert qkv_mb < measured.loc[kind, "kept blocks"] < measured.loc[kind, "masked dense"] / 2
    # the flash blocks keep q, k, v, the output and the log-sum-exp: the same for every layout, O(S D)
    flash = measured["flash blocks (runs here)"]
    assert flash.nunique() == 1 and qkv_mb < flash.iloc[0] < qkv_mb * 4 / 3 + 0.01
    assert "benchmarks.sparse_attention" in bench_note and bench.get("visible") is False  # a hint, no table


def test_layout_costs_measured_beside_the_accounting(served):
    """Attention layouts tab, issue 56: dense, local, strided, linear and a 3:1 hybrid, measured here (forward +
    backward, cache after a prefill) beside the derived accounting; the cache figures must agree exactly."""
    time_figure, cache_figure, measured, derived = served[0].predict(128, 16, 8, api_name="/layout_costs")
    assert_plot(time_figure)
    assert_plot(cache_figure)
    table = frame(measured).merge(frame(derived), on=["layout", "length"])
    assert set(table["layout"]) == {"dense", "local", "strided", "linear", "hybrid 3:1"}
    assert sorted(set(table["length"])) == [64, 128] and len(table) == 10
    assert table["cache after prefill (bytes)"].tolist() == table["cache (bytes, derived)"].tolist()
    cache = table.set_index(["layout", "length"])["cache after prefill (bytes)"]
    assert cache["linear", 64] == cache["linear", 128] and cache["local", 64] == cache["local", 128]
    assert cache["dense", 128] == 2 * cache["dense", 64] and cache["hybrid 3:1", 128] < 0.5 * cache["dense", 128]
    assert (table["forward + backward (ms)"] > 0).all() and (table["mixing GFLOP forward (derived)"] > 0).all()


def generate(client, prompt="A hacker is", names=("rope",), strategy="greedy", max_new=8, beams=2,
             penalty_type="transformers", seed=0, temperature=0.8):  # fmt: skip
    return client.predict(prompt, list(names), strategy, max_new, temperature, 0.95, beams, 0.6, penalty_type, seed,
                          api_name="/generate")  # fmt: skip


def test_generation_greedy_equals_generate_and_models_side_by_side(served):
    from hf_llmsys.demo.token_text import visible_whitespace

    client, ctx = served
    zoo = ctx.zoo.zoo
    df = frame(generate(client, names=TINY_ENCODINGS))
    assert df["model"].tolist() == TINY_ENCODINGS
    ids = zoo.tokenizer("A hacker is", return_tensors="pt", add_special_tokens=False)["input_ids"]
    out = zoo.models["rope"].generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=zoo.tokenizer.pad_token_id)
    decoded = zoo.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert df.set_index("model").loc["rope", "output"] == visible_whitespace(decoded)
    a = frame(generate(client, strategy="sampling", seed=3))
    b = frame(generate(client, strategy="sampling", seed=3))
    assert a["output"].tolist() == b["output"].tolist()  # seeded sampling is reproducible


def test_gnmt_beam_search_on_t5_and_causal_llmsys_models(served):
    from hf_llmsys.generation import generate_gnmt

    client, ctx = served
    t5 = ctx.seq2seq[0]
    df = frame(generate(client, names=[t5.name], strategy="beam search", beams=3, penalty_type="gnmt"))
    ids = t5.tokenizer("A hacker is", return_tensors="pt")["input_ids"]
    out = generate_gnmt(t5.model, ids, max_new_tokens=8, num_beams=3, length_penalty=0.6, early_stopping=True,
                        pad_token_id=t5.tokenizer.pad_token_id)  # fmt: skip
    assert df["output"][0] == t5.tokenizer.decode(out[0], skip_special_tokens=True)
    # decoder-only llmsys models take it too: the page's beam equals the plugin's GNMT generate
    zoo = ctx.zoo.zoo
    df = frame(generate(client, names=["rope"], strategy="beam search", beams=3, penalty_type="gnmt"))
    ids = zoo.tokenizer("A hacker is", return_tensors="pt", add_special_tokens=False)["input_ids"]
    out = generate_gnmt(zoo.models["rope"], ids, max_new_tokens=8, num_beams=3, length_penalty=0.6,
                        early_stopping=True, pad_token_id=zoo.tokenizer.pad_token_id)  # fmt: skip
    assert df["output"][0] == zoo.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def test_gnmt_generate_kwargs_for_any_transformers_model():
    """GNMT is hf-llmsys' beam search passed as custom_generate, so a plain transformers model gets it too; other
    strategies and the transformers penalty leave generate as it is."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_llmsys.demo.generation_tab import DecodingOptions, GenerationModel, generate_kwargs
    from hf_llmsys.generation import beam_search, generate_gnmt

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, bos_token_id=0,
                                       eos_token_id=1)).eval()  # fmt: skip
    entry = GenerationModel(name="gpt2", model=model, tokenizer=None)
    options = DecodingOptions(strategy="beam search", length_penalty_type="gnmt", max_new_tokens=5, num_beams=3,
                              length_penalty=0.6)  # fmt: skip
    kwargs = generate_kwargs(entry, options)
    assert kwargs["custom_generate"] is beam_search and kwargs["length_penalty_type"] == "gnmt"
    ids = torch.randint(2, 32, (1, 6), generator=torch.Generator().manual_seed(1))
    expected = generate_gnmt(model, ids, num_beams=3, length_penalty=0.6, early_stopping=True, max_new_tokens=5)
    assert torch.equal(model.generate(ids, **kwargs), expected)
    plain_beam, gnmt_greedy = DecodingOptions(strategy="beam search"), DecodingOptions(length_penalty_type="gnmt")
    for other in (plain_beam, gnmt_greedy):
        assert not {"custom_generate", "length_penalty_type"} & set(generate_kwargs(entry, other))


def test_cleaning_verdict_and_text_equal_the_pipeline(served):
    from datasets import Dataset

    from hf_llmsys.cleaning import clean
    from hf_llmsys.data.corpus import load_default_corpus

    client = served[0]
    spam = "<p>Click here!!!</p><p>Buy now</p>"
    prose = [load_default_corpus()[i : i + 1800] for i in range(100_000, 118_000, 1800)]
    report = clean(Dataset.from_dict({"text": [spam, *prose]}), "fineweb-like").report.to_dict()
    (rule,) = [rule for rule, examples in report["drop_examples"].items() if examples[0]["index"] == 0]
    verdict, trace, _ = client.predict(spam, "fineweb-like", api_name="/clean")
    assert "**Dropped**" in verdict and f"`{rule}`" in verdict
    assert f"DROP ({rule})" in frame(trace)["result"].tolist()
    for doc in prose:
        kept = clean(Dataset.from_dict({"text": [doc]}), "fineweb-like").dataset
        if len(kept):
            break
    else:
        pytest.fail("no prose chunk survives fineweb-like")
    verdict, trace, normalised = client.predict(doc, "fineweb-like", api_name="/clean")
    assert verdict.startswith("**Kept**") and normalised == kept[0]["text"]
    assert "DROP" not in " ".join(frame(trace)["result"])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.predict("x" * 2001, False, api_name="/perplexity"), "2001 characters is over the limit of 2000"),
        (lambda c: c.predict("abc " * 200, False, api_name="/perplexity"), "tokens is over the limit of 300 tokens"),
        (lambda c: generate(c, max_new=65), "Value 65 is greater than maximum value 64"),  # the slider's own bound
        (lambda c: generate(c, strategy="beam search", beams=5), "Value 5 is greater than maximum value 4"),
        (lambda c: show(c, "alibi", heads=17), "Value 17 is greater than maximum value 16"),
        (lambda c: c.predict(2048, 8, 16, 2, 4, 16, api_name="/sparse"), "greater than maximum value 1024"),
        (
            lambda c: c.predict(64, 8, 16, 9, 4, 16, api_name="/sparse"),
            "fixed summary c: 9 is outside the allowed range",
        ),
        (lambda c: generate(c, names=[]), "models: choose at least one model"),
        (lambda c: c.predict("", "c4", api_name="/clean"), "document: paste some text first"),
    ],
)
def test_over_limit_requests_get_the_limit_message(served, call, message):
    with pytest.raises(AppError, match=message):
        call(served[0])
    status = served[0].predict(api_name="/zoo_status")[0]
    assert status.startswith("Zoo loaded")  # the server is still up


def test_limits_and_queue_settings_are_in_the_page(served):
    client, ctx = served
    config = client.config
    texts = " ".join(str(c.get("props", {}).get("value", "")) for c in config["components"])
    assert "2000 characters" in texts and "64 new tokens" in texts and "4 beams" in texts
    assert ctx.limits.concurrency_limit == 2


def test_loopback_only_no_share_no_analytics_no_server_paths(served, demo_server):  # noqa: F811
    url, ctx, demo = demo_server
    assert url.startswith("http://127.0.0.1:") and demo.server_name == "127.0.0.1"
    assert demo.share is False and demo.analytics_enabled is False and os.environ["GRADIO_ANALYTICS_ENABLED"] == "False"
    assert demo._queue.max_size == ctx.limits.max_queue_size
    assert demo._queue.default_concurrency_limit == ctx.limits.concurrency_limit
    assert all(fn.concurrency_limit == "default" for fn in demo.fns.values() if fn.queue)  # none lifts the limit
    inputs = {c["type"] for c in served[0].config["components"] if c.get("props", {}).get("interactive") is not False}
    assert not inputs & {"file", "uploadbutton", "image", "audio", "video", "fileexplorer", "model3d"}


def test_twenty_concurrent_clients_are_all_served(served):
    url = served[0].src
    clients = [gradio_client.Client(url, verbose=False) for _ in range(20)]  # 20 sessions, connected up front

    def one(client):
        start = time.perf_counter()
        _, tokens, _ = client.submit(TEXT, False, api_name="/perplexity").result(timeout=300)
        return time.perf_counter() - start, len(tokens["data"])

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(one, clients))
    for client in clients:
        client.close()
    latencies = sorted(r[0] for r in results)
    assert len(results) == 20 and len({r[1] for r in results}) == 1  # all served, same answer
    p95 = latencies[math.ceil(0.95 * len(latencies)) - 1]
    print(f"\n20 concurrent /perplexity clients: median {statistics.median(latencies):.2f} s, p95 {p95:.2f} s")


def test_cli_rejects_bad_options(tmp_path):
    from hf_llmsys.cli.demo import parse_args
    from hf_llmsys.demo.zoo import resolve_zoo_source

    with pytest.raises(ValueError, match="--zoo and --quick"):
        parse_args(["--zoo", "x", "--quick"])
    with pytest.raises(ValueError, match="--max_beams must be >= 1"):
        parse_args(["--max-beams", "0"])
    with pytest.raises(ValueError, match="has no zoo.json"):
        resolve_zoo_source(str(tmp_path))
    with pytest.raises(ValueError, match="not a Hub repo id"):
        resolve_zoo_source(str(tmp_path / "missing" / "deeper"))
    with pytest.raises(ValueError, match="could not download the Hub repo"):
        resolve_zoo_source("nobody-here/no-such-zoo")  # HF_HUB_OFFLINE=1 in these tests
    assert parse_args([]).host == "127.0.0.1"


def test_background_training_reports_progress_then_loads(tmp_path, capfd):
    from hf_llmsys.data.corpus import load_default_corpus
    from hf_llmsys.demo.zoo import FULL_ZOO_DIR, ZooManager

    text = tmp_path / "text.txt"
    text.write_text(load_default_corpus()[:20000], encoding="utf-8")
    overrides = {"encodings": ["none", "rope"], "rope_scalings": [], "train_files": [str(text)]}
    manager = ZooManager(cache_dir=tmp_path / "cache" / "zoo", preset="smoke", settings_overrides=overrides,
                         skip_folders=(FULL_ZOO_DIR,))  # fmt: skip
    manager.start()
    assert "Training the demo zoo in the background" in manager.status()
    zoo = manager.wait(timeout=120)
    assert zoo is not None and set(zoo.models) == {"none", "rope"}, manager.status()
    assert manager.status().startswith("Zoo loaded") and (tmp_path / "cache" / "zoo" / "zoo.json").is_file()
    assert not (tmp_path / "cache" / "zoo.partial").exists()
    console = capfd.readouterr()
    printed = console.out + console.err
    assert "'loss'" not in printed and "'train_runtime'" not in printed  # no Trainer log dicts
    assert "demo zoo: 0/" in printed and "demo zoo: trained" in printed  # the progress line, one per stage
    assert "{'loss'" not in printed and "{'train_runtime'" not in printed
    lines = [line for line in printed.splitlines() if line.strip()]
    assert lines and all(line.startswith("demo zoo: ") for line in lines), lines  # no bars, warnings, result lines
    second = ZooManager(cache_dir=tmp_path / "cache" / "zoo", skip_folders=manager.skip_folders)
    second.start()  # the cache is found: no training
    assert second.zoo is not None and second._thread is None


@pytest.mark.slow
def test_demo_zoo_trains_in_the_background_and_serves(tmp_path):
    """The real first run: the 'demo' preset, every encoding, trained by the manager the page uses."""
    from hf_llmsys.demo.zoo import FULL_ZOO_DIR, ZooManager
    from hf_llmsys.models.positional_encodings import POSITIONAL_ENCODINGS

    start = time.perf_counter()
    manager = ZooManager(cache_dir=tmp_path / "zoo", skip_folders=(FULL_ZOO_DIR,))
    manager.start()
    zoo = manager.wait(timeout=900)
    elapsed = time.perf_counter() - start
    assert zoo is not None, manager.status()
    assert set(zoo.models) == set(POSITIONAL_ENCODINGS)
    vocab = len(zoo.tokenizer)
    for run in zoo.report["runs"]:
        at_train_length = [r for r in run["results"] if r["eval_length"] == zoo.train_length][0]
        assert at_train_length["ppl"] < vocab / 3, run  # learned something beyond a uniform guess
    print(f"\ndemo zoo: {elapsed:.0f} s wall on {os.cpu_count()} CPUs, load {os.getloadavg()}")


@pytest.mark.slow
def test_real_pretrained_model_in_the_perplexity_and_generation_tabs(tiny_zoo):  # noqa: F811
    from hf_llmsys.checkpoints.smollm2 import find_smollm2
    from hf_llmsys.evaluation.perplexity import corpus_perplexity

    if find_smollm2() is None:
        pytest.skip("SmolLM2 not fetched: python scripts/fetch_smollm2.py (LLMSYS_SMOLLM2_DIR)")
    demo, url, ctx = launch_demo(["--zoo", str(tiny_zoo)], real_model=True)
    try:
        client = gradio_client.Client(url, verbose=False)
        real = ctx.real_model
        coloured, _, summary = client.predict(TEXT, True, api_name="/perplexity")
        row = frame(summary).set_index("model").loc[real.name]
        expected = corpus_perplexity(real.model, real.tokenizer, TEXT, max_length=512, stride=256)
        assert row["bits per byte"] == pytest.approx(expected.bits_per_byte, rel=1e-5)
        assert row["bits per byte"] < 3.0 and coloured.count('class="surprisal-row"') == len(TINY_ENCODINGS) + 1
        out = frame(generate(client, prompt="What is a hacker?", names=[real.name], max_new=16))
        assert len(out["output"][0].split()) >= 3  # the instruction-tuned model answers in words
    finally:
        demo.close()


def test_tables_show_rounded_numbers_and_keep_the_exact_ones(served):
    client, _ = served
    _, _, summary = client.predict(TEXT, False, api_name="/perplexity")
    shown = summary["metadata"]["display_value"]
    exact = frame(summary)
    column = exact.columns.get_loc("token ppl")
    for row, cells in enumerate(shown):
        value = exact.iloc[row, column]
        assert cells[column] == f"{value:.4g}" and len(cells[column].replace(".", "").lstrip("0")) <= 4
        assert value != float(cells[column])  # the exact figure underneath (gradio_client, tests)


def test_page_load_renders_every_tabs_default_view(served, demo_server):  # noqa: F811
    """Each tab's main outputs are filled by a load event of the page (the browser test sees them drawn)."""
    _, _, demo = demo_server
    loaded = set()
    for dependency in demo.config["dependencies"]:
        if any(target[1] == "load" for target in dependency["targets"]):
            loaded.update(dependency["outputs"])
    labels = {c["id"]: c["props"].get("label") or c["props"].get("elem_id") for c in demo.config["components"]}
    expected = {"picture", "numbers", "next-token distributions compared", "surprisal per token", "perplexity per model",
                "zoo", "RoPE runs of zoo.json (perplexity at each evaluation length)", "layouts (query rows, key columns)",
                "keys per query", "memory measured: MB saved for backward by one attention call",
                "outputs side by side", "verdict", "steps"}  # fmt: skip
    assert expected <= {labels[i] for i in loaded}, expected - {labels[i] for i in loaded}


def test_user_models_join_the_perplexity_and_generation_tabs(tiny_zoo, tmp_path):  # noqa: F811
    """``--model`` (repeatable): a transformers GPT-2 and one of ours, beside the zoo, scored and generating."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from hf_llmsys import LlmsysLlamaConfig, LlmsysLlamaForCausalLM
    from hf_llmsys.evaluation.perplexity import corpus_perplexity

    tokenizer = AutoTokenizer.from_pretrained(tiny_zoo / "tokenizer")
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=1, n_head=2))
    ours = LlmsysLlamaForCausalLM(LlmsysLlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                                    num_hidden_layers=1, num_attention_heads=2,
                                                    max_position_embeddings=128))  # fmt: skip
    folders = {}
    for name, model in (("my-gpt2", gpt2), ("my-llama", ours)):
        folders[name] = tmp_path / name
        model.save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    argv = [
        "--zoo",
        str(tiny_zoo),
        "--no-train",
        "--model",
        str(folders["my-gpt2"]),
        "--model",
        str(folders["my-llama"]),
    ]
    demo, url, ctx = launch_demo(argv)
    try:
        client = gradio_client.Client(url, verbose=False)
        coloured, _, summary = client.predict(TEXT, False, api_name="/perplexity")
        rows = frame(summary).set_index("model")
        assert list(rows.index) == [*TINY_ENCODINGS, "my-gpt2", "my-llama"]  # the zoo stays, ours follow
        assert coloured.count('class="surprisal-row"') == len(TINY_ENCODINGS) + 2
        for name, window in (("my-gpt2", 64), ("my-llama", 128)):
            model = next(m.model for m in ctx.user_models if m.name == name)
            expected = corpus_perplexity(model, tokenizer, TEXT, max_length=window, stride=window // 2)
            assert rows.loc[name, "token ppl"] == pytest.approx(expected.ppl, rel=1e-5)
        out = frame(generate(client, names=["rope", "my-gpt2", "my-llama"], max_new=4))
        assert out["model"].tolist() == ["rope", "my-gpt2", "my-llama"] and (out["new tokens"] > 0).all()
        client.close()
    finally:
        demo.close()
    with pytest.raises(ValueError, match="--model .*no such folder"):
        launch_demo(["--zoo", str(tiny_zoo), "--no-train", "--model", str(tmp_path / "missing")])


WHITESPACE_BYTES = {"⏎": b"\n", "␣": b" ", "⇥": b"\t"}


def label_bytes(label: str) -> bytes:
    """The bytes a token label stands for: ``⏎×2`` runs, ``\\xNN`` escapes and plain text read back."""
    runs = [re.fullmatch(r"([⏎␣⇥])(?:×(\d+))?", run) for run in label.split(" ")]
    if all(runs):
        return b"".join(WHITESPACE_BYTES[run[1]] * int(run[2] or 1) for run in runs)
    parts = re.split(r"(\\x[0-9a-f]{2})", label)
    return b"".join(bytes.fromhex(part[2:]) if re.fullmatch(r"\\x[0-9a-f]{2}", part) else part.encode()
                    for part in parts)  # fmt: skip


def test_tokens_show_whole_characters_as_text_and_partial_bytes_as_escapes(tiny_zoo):  # noqa: F811
    """Byte-level BPE splits 床 (E5 BA 8A) across tokens: each label is its text when its bytes are whole UTF-8
    characters, else ``\\xNN`` escapes; the labels, read back as bytes, spell the text exactly."""
    from transformers import AutoTokenizer

    from hf_llmsys.demo.permutation import untrained_pair
    from hf_llmsys.demo.token_text import token_label

    text = "床前明月 the\n\n fox"
    for tokenizer in (untrained_pair()[0], AutoTokenizer.from_pretrained(tiny_zoo / "tokenizer")):
        labels = [token_label(tokenizer, i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]
        assert any(label.startswith("\\x") for label in labels) and "\ufffd" not in "".join(labels)
        assert b"".join(label_bytes(label) for label in labels) == text.encode()


def test_whitespace_only_output_is_shown_visibly():
    from hf_llmsys.demo.token_text import visible_whitespace

    assert visible_whitespace("\n" * 24) == "⏎×24"
    assert visible_whitespace(" \n\n\t") == "␣ ⏎×2 ⇥"
    assert visible_whitespace("") == "∅ (no text)"
    assert visible_whitespace(" the" + "\n" * 23) == " the⏎×23"  # newlines inside text: one line per cell
    assert visible_whitespace(" a b\nc") == " a b⏎c"


def test_figures_label_every_line_and_mask_future_keys():
    """Checked on the matplotlib artists (the page shows pictures): each legend names every line of its axes; the
    causal views (T5 decoder, ALiBi) draw future keys as masked (NaN), past keys as their values."""
    import numpy as np

    from hf_llmsys.demo import positions_tab
    from hf_llmsys.models.position_biases import relative_distance, t5_relative_position_bucket
    from hf_llmsys.plots import legend_labels, legend_texts, line_figure

    params = positions_tab.EncodingParams(length=24, heads=4)
    for kind, view in positions_tab.ENCODING_VIEWS.items():
        shown = view(params)
        curve = line_figure(shown.curve, xlabel=shown.x_title, ylabel=shown.y_title)
        assert legend_texts(curve) == legend_labels(curve) == [list(dict.fromkeys(shown.curve["series"]))], kind
        for ax in shown.figure.axes:
            if ax.get_legend():
                assert [t.get_text() for t in ax.get_legend().get_texts()] == [line.get_label() for line in ax.lines]
    t5 = positions_tab.view_t5(params).figure.axes[0].images[0].get_array()  # the causal (decoder) panel
    future = np.triu(np.ones((24, 24), dtype=bool), k=1)
    assert np.ma.getmaskarray(np.ma.masked_invalid(t5))[future].all()
    positions = torch.arange(24)[None]
    buckets = t5_relative_position_bucket(relative_distance(positions, positions)[0], False, 32, 128).numpy()
    assert (np.asarray(t5)[~future] == buckets[~future]).all()
    alibi = positions_tab.view_alibi(params).figure.axes[0].images[0].get_array()
    assert np.isnan(np.asarray(alibi, dtype=float))[future].all()


def test_zoo_not_ready_is_a_message_without_traceback(tmp_path, capfd):
    """No zoo (none cached, --no-train): zoo-free tabs work, zoo tabs answer one message, the console shows no
    traceback; without SmolLM2 the page says how to fetch it."""
    demo, url, ctx = launch_demo(["--no-train", "--cache-dir", str(tmp_path / "no-zoo"), "--quick"])
    try:
        client = gradio_client.Client(url, verbose=False)
        with pytest.raises(AppError, match="The zoo is not ready yet"):
            client.predict(TEXT, "yarn", 64, api_name="/rope_scaling")
        with pytest.raises(AppError, match="not loaded yet"):
            generate(client, names=["rope"])
        texts = " ".join(str(c.get("props", {}).get("value", "")) for c in client.config["components"])
        assert "python scripts/fetch_smollm2.py" in texts and "The zoo is 7 tiny" in texts
        client.close()
    finally:
        demo.close()
    console = capfd.readouterr()
    assert "Traceback" not in console.out + console.err


def test_sparse_bench_file_of_the_sparse_attention_bench_becomes_rows():
    """`llmsys demo --sparse_bench FILE` reads what `python -m benchmarks.sparse_attention --json FILE` writes: the
    committed results file gives one row per timed kernel variant and length, with its figures."""
    import json
    from pathlib import Path

    from hf_llmsys.demo.sparse_tab import bench_table

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "sparse_attention-cpu.json"
    kernels = json.loads(path.read_text())["kernel"]
    table = bench_table(path)
    assert sorted(table["variant"]) == sorted(kernels)
    local = table.set_index("variant").loc["local"]
    assert local["ms"] == kernels["local"][str(int(local["length"]))]["ms"]
