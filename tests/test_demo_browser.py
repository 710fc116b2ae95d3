"""The demo in a real browser: Debian's chromium driven by playwright loads the page, finds every tab's default
view rendered without a click, checks the Chinese permutation example is drawn with real glyphs (not tofu) and
reads what is drawn: the cells of the tables (rounded numbers, the memory columns, token labels), that no table is
wider than its box, the legend and lines of the paper's plot; an error message closes when another tab opens.
Then it switches every tab, enters text, clicks, waits for each result and takes a screenshot that must not be
blank. (The matplotlib pictures are images here; their legends are checked where they are built, test_demo.py.)"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from test_demo_support import TINY_ENCODINGS, demo_server, free_port, tiny_zoo  # noqa: F401  (session fixtures)

CHROMIUM = os.environ.get("LLMSYS_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--headless=new", "--disable-dev-shm-usage", "--disable-gpu", "--disable-background-networking",
        "--disable-extensions", "--no-first-run"]  # fmt: skip
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        pytest.skip(f"chromium not found at {CHROMIUM} (apt-get install chromium; or set LLMSYS_CHROMIUM)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


def open_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    return page


@pytest.fixture(scope="module")
def page(browser, demo_server):  # noqa: F811  (the imported session fixture)
    page = open_page(browser, demo_server[0])
    yield page
    page.close()


def open_tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click()


def screenshot_is_not_blank(page, path: Path) -> None:
    from PIL import Image

    page.screenshot(path=str(path), full_page=True)
    image = Image.open(path).convert("L")
    histogram = image.histogram()
    assert image.size[0] >= 1000 and sum(1 for count in histogram if count > 50) > 20, "screenshot looks blank"
    dark = sum(histogram[:128]) / (image.size[0] * image.size[1])
    assert 0.001 < dark < 0.9, f"screenshot has {dark:.1%} dark pixels"


GLYPH_BITMAPS = """([chars, font]) => {
    // Each character drawn alone on a canvas in the given CSS font; returns one bitmap string per character,
    // and the bitmap of U+E000 and U+10FFFD (private use: no font has a glyph there, drawn as the missing glyph).
    const canvas = document.createElement("canvas");
    canvas.width = canvas.height = 48;
    const ctx = canvas.getContext("2d", {willReadFrequently: true});
    const draw = (ch) => {
        ctx.clearRect(0, 0, 48, 48);
        ctx.font = font;
        ctx.fillStyle = "#000";
        ctx.textBaseline = "top";
        ctx.fillText(ch, 4, 4);
        const data = ctx.getImageData(0, 0, 48, 48).data;
        let bits = "";
        for (let i = 3; i < data.length; i += 4) bits += data[i] > 127 ? "1" : "0";
        return bits;
    };
    return {glyphs: chars.map(draw), missing: ["\\uE000", "\\u{10FFFD}"].map(draw)};
}"""


def glyphs_render(page, selector: str) -> None:
    """The characters of the text box `selector`, in its own computed font, are real glyphs: each differs from the
    missing-glyph box and from the others (tofu draws every character as the same box)."""
    box = page.locator(selector)
    text = box.input_value()
    font = box.evaluate("el => { const s = getComputedStyle(el); return `32px ${s.fontFamily}`; }")
    chars = sorted(set(text))
    drawn = page.evaluate(GLYPH_BITMAPS, [chars, font])
    glyphs, missing = drawn["glyphs"], drawn["missing"]
    for ch, bits in zip(chars, glyphs, strict=True):
        assert bits.count("1") > 20, f"{ch!r} draws nothing in {font}"
        assert bits not in missing, f"{ch!r} is drawn as the missing-glyph box (tofu) in {font}: no CJK font?"
    assert len(set(glyphs)) == len(chars), f"{chars} are not drawn as distinct glyphs in {font}"


LEGEND_AND_LINES = """([id]) => {
    // The legend labels of the vega plot in element `id` and how many line marks carry a drawn path.
    const svg = document.querySelector(`${id} svg`);
    if (!svg) return {labels: [], lines: 0};
    const labels = Array.from(svg.querySelectorAll("g.role-legend text")).map(t => t.textContent);
    const lines = Array.from(svg.querySelectorAll("g.mark-line path")).filter(p => /L/.test(p.getAttribute("d") || ""));
    return {labels, lines: lines.length};
}"""


def legend_shows(page, plot: str, series: list[str]) -> None:
    """The LinePlot `plot` shows exactly `series` in its legend (gradio 6.31 keeps a plot's first series unless
    an update names them) and draws a line for each: waits up to the page timeout."""
    try:
        page.wait_for_function(
            f"([id, want]) => {{ const got = ({LEGEND_AND_LINES})([id]); "
            "return want.every(s => got.labels.includes(s)) && got.labels.filter(s => s !== 'series').length === "
            "want.length && got.lines >= want.length; }",
            arg=[plot, series],
        )
    except Exception as error:
        got = page.evaluate(LEGEND_AND_LINES, [plot])
        raise AssertionError(f"{plot}: wanted the series {series} drawn, the page shows {got}") from error


TABLES = """() => Array.from(document.querySelectorAll("[role=grid].table-wrap"))
    .filter((grid) => grid.offsetParent !== null)  // tables of the open tab
    .map((grid) => {
        const viewport = grid.querySelector(".virtual-table-viewport") || grid;
        return {
            label: grid.getAttribute("aria-label"),
            overflow: Math.max(grid.scrollWidth - grid.clientWidth, viewport.scrollWidth - viewport.clientWidth),
            headers: Array.from(grid.querySelectorAll("th")).map((th) => th.getAttribute("title") || th.innerText),
            rows: Array.from(grid.querySelectorAll(".virtual-body [role=row]")).map(
                (row) => Array.from(row.querySelectorAll("[role=gridcell], td")).map((td) => td.innerText.trim())),
        };
    })"""


def tables(page) -> dict[str, dict]:
    """The open tab's tables as drawn: label -> {"headers", "rows" (cell texts), "overflow" (px past the box)}."""
    return {table["label"]: table for table in page.evaluate(TABLES)}


def table_fits(page, label: str, cell: str) -> dict:
    """The table `label` of the open tab once a cell shows `cell`, after checking that none of the tab's tables is
    cut at the right."""
    page.locator(f'[role=grid][aria-label="{label}"] .virtual-body [role=row]', has_text=cell).first.wait_for()
    drawn = tables(page)
    cut = {name: t["overflow"] for name, t in drawn.items() if t["overflow"] > 1}
    assert not cut, f"tables wider than their box (px): {cut}"
    return drawn[label]


def column(table: dict, header: str) -> list[str]:
    index = table["headers"].index(header)
    return [row[index] for row in table["rows"] if len(row) > index]


def test_every_tab_in_chromium(page, demo_server, tmp_path):  # noqa: F811  (the imported session fixture)
    shots = Path(os.environ.get("LLMSYS_DEMO_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    page.get_by_text("Zoo loaded from").wait_for()
    page.get_by_text("Limits per request").wait_for()

    # Every tab's default view is there on load, before any click.
    page.get_by_text("PE(i)·PE(j) = Σ cos").wait_for()  # tab 1: the default (sinusoidal) encoding
    page.locator("#encoding-curve img").first.wait_for()  # its curve is drawn too (a picture redrawn per view)
    first_curve = page.locator("#encoding-curve img").first.get_attribute("src")
    page.get_by_text("same tokens in another order").wait_for()  # tab 1: the permutation example
    glyphs_render(page, "#permutation-a textarea")
    glyphs_render(page, "#permutation-b textarea")
    page.locator("#permutation-a").screenshot(path=str(shots / "permutation-text.png"))
    order = table_fits(page, "next-token distributions compared", "NoPE")
    top = column(order, next(h for h in order["headers"] if h.startswith("top-3 after")))
    byte_symbols = [c for cell in top for c in cell if "\u0100" <= c <= "\u0143" or c == "\ufffd"]
    assert top and not byte_symbols, f"top tokens shown as byte-level BPE symbols, not text or \\xNN: {top}"
    open_tab(page, "Perplexity")
    page.locator("#surprisal .surprisal-row").first.wait_for()
    assert page.locator("#surprisal .surprisal-row").count() == 3
    summary = page.locator("#ppl-summary")
    summary.get_by_text("bits per byte").wait_for()
    numbers = re.findall(r"\d+\.\d+", summary.inner_text())
    assert numbers and all(len(n.replace(".", "").lstrip("0")) <= 4 for n in numbers), numbers  # 4 significant
    summary_table = table_fits(page, "perplexity per model", "alibi")
    assert summary_table["headers"][:2] == ["model", "bits per byte"]  # the figure that compares tokenizers first
    assert column(summary_table, "model") == TINY_ENCODINGS
    page.locator("#zoo-curves img").wait_for()  # drawn on load (its legend: test_demo.py, on the figure)
    legend_shows(page, "#paper-curves", ["sinusoidal", "rotary", "T5 bias", "ALiBi"])
    rope_runs = table_fits(page, "RoPE runs of zoo.json (perplexity at each evaluation length)", "rope+yarn")
    assert column(rope_runs, "run (zoo.json, held-out text)") == ["rope", "rope+yarn"]
    open_tab(page, "Attention layouts")
    page.get_by_text("kept blocks + recompute", exact=True).wait_for()
    measured = table_fits(page, "memory measured: MB saved for backward by one attention call", "fixed")
    assert measured["headers"] == ["layout", "masked dense", "kept blocks", "kept blocks + recompute",
                                   "flash blocks (runs here)"]  # fmt: skip
    assert len(set(column(measured, "flash blocks (runs here)"))) == 1  # O(S D) whatever the layout
    assert len(set(column(measured, "kept blocks"))) > 1  # the kept blocks shrink with the layout
    page.get_by_text("No benchmark file configured").wait_for()  # a sentence, not a cut table cell
    open_tab(page, "Generation")
    page.get_by_text("prompt tokens").wait_for()
    outputs = table_fits(page, "outputs side by side", "alibi")
    assert column(outputs, "model") == ["rope", "alibi"] and all(column(outputs, "output")), outputs  # none blank

    open_tab(page, "Perplexity")  # an error message of one tab closes when another tab opens
    page.locator("#ppl-text textarea").fill(" ")
    page.locator("#score").click()
    page.get_by_text("text: paste some text first").wait_for()
    open_tab(page, "Cleaning")
    page.get_by_text("text: paste some text first").wait_for(state="hidden", timeout=5_000)
    open_tab(page, "Cleaning")
    page.locator("#verdict").get_by_text("Dropped").wait_for()

    open_tab(page, "Positional encodings")
    page.get_by_role("radio", name="ALiBi linear biases").check()
    page.locator("#show-encoding").click()
    page.get_by_text("ALiBi adds").wait_for()
    page.wait_for_function(  # the curve was redrawn for ALiBi: another picture than the default view's
        "([old]) => { const img = document.querySelector('#encoding-curve img'); return img && img.src !== old; }",
        arg=[first_curve],
    )
    page.locator("#compare-orders").click()
    page.get_by_text("same tokens in another order").wait_for()
    screenshot_is_not_blank(page, shots / "positions.png")

    open_tab(page, "Perplexity")
    page.locator("#ppl-text textarea").fill("The wise and the foolish disguise their lack of understanding.")
    page.locator("#score").click()
    page.locator("#surprisal .surprisal-row").first.wait_for()
    assert page.locator("#surprisal .surprisal-row").count() == 3
    screenshot_is_not_blank(page, shots / "perplexity.png")

    open_tab(page, "Attention layouts")
    page.locator("#draw-layouts").click()
    page.get_by_text("kept blocks + recompute", exact=True).wait_for()
    screenshot_is_not_blank(page, shots / "sparse.png")
    page.locator("#measure-layout-costs").click()  # dense, local, strided, linear and a 3:1 hybrid, timed here
    page.locator("#costs-measured").filter(has_text="hybrid 3:1").wait_for()
    screenshot_is_not_blank(page, shots / "layout-costs.png")

    open_tab(page, "Generation")
    page.locator("#prompt textarea").fill("A hacker")
    page.locator("#generate").click()
    page.get_by_text("prompt tokens").wait_for()
    screenshot_is_not_blank(page, shots / "generation.png")

    open_tab(page, "Cleaning")
    page.locator("#check-document").click()
    page.locator("#verdict").get_by_text("Dropped").wait_for()
    screenshot_is_not_blank(page, shots / "cleaning.png")


@pytest.mark.slow
def test_a_page_opened_during_training_fills_in_when_the_zoo_is_loaded(browser, tmp_path):
    """The first start as a newcomer meets it: the page opens while the zoo trains (held until the page is open),
    says so, and its perplexity and generation views fill in by themselves once the zoo is loaded."""
    import threading

    from hf_llmsys.cli.demo import launch
    from hf_llmsys.data.corpus import load_default_corpus
    from hf_llmsys.demo.app import DemoContext, build_app
    from hf_llmsys.demo.zoo import FULL_ZOO_DIR, ZooManager

    text = tmp_path / "text.txt"
    text.write_text(load_default_corpus()[:20000], encoding="utf-8")
    manager = ZooManager(cache_dir=tmp_path / "zoo", preset="smoke", skip_folders=(FULL_ZOO_DIR,),
                         settings_overrides={"encodings": ["none", "rope"], "rope_scalings": [],
                                             "train_files": [str(text)]})  # fmt: skip
    page_open, train = threading.Event(), manager._train_and_load
    manager._train_and_load = lambda: (page_open.wait(60), train())
    manager.start()
    demo, port = build_app(DemoContext(zoo=manager)), free_port()
    launch(demo, "127.0.0.1", port, prevent_thread_lock=True)
    try:
        page = open_page(browser, f"http://127.0.0.1:{port}/")
        page.get_by_text("Training the demo zoo in the background").wait_for()
        open_tab(page, "Perplexity")
        page.get_by_text("The zoo is 7 tiny").wait_for()  # its limits, before it exists
        page_open.set()
        page.get_by_text("Zoo loaded from").wait_for()
        assert column(table_fits(page, "perplexity per model", "rope"), "model") == ["none", "rope"]
        page.locator("#zoo-curves img").wait_for()
        open_tab(page, "Generation")
        assert column(table_fits(page, "outputs side by side", "rope"), "model") == ["rope"]
        page.close()
    finally:
        demo.close()
