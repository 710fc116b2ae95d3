"""The demo in a real browser: Debian's chromium driven by playwright loads the page, switches every tab, enters
text, clicks, waits for each result and takes a screenshot that must not be blank."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from test_demo_support import demo_server, tiny_zoo  # noqa: F401  (session fixtures)

CHROMIUM = os.environ.get("LLMSYS_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--headless=new", "--disable-dev-shm-usage", "--disable-gpu", "--disable-background-networking",
        "--disable-extensions", "--no-first-run"]  # fmt: skip
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def page(demo_server):  # noqa: F811  (the imported session fixture)
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        pytest.skip(f"chromium not found at {CHROMIUM} (apt-get install chromium; or set LLMSYS_CHROMIUM)")
    url = demo_server[0]
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(url)
        yield page
        browser.close()


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


def test_every_tab_in_chromium(page, tmp_path):
    shots = Path(os.environ.get("LLMSYS_DEMO_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    page.get_by_text("Zoo loaded from").wait_for()
    page.get_by_text("Limits per request").wait_for()

    open_tab(page, "Positional encodings")
    page.get_by_role("radio", name="alibi").check()
    page.locator("#show-encoding").click()
    page.get_by_text("ALiBi adds").wait_for()
    page.locator("#compare-orders").click()
    page.get_by_text("same tokens in another order").wait_for()
    screenshot_is_not_blank(page, shots / "positions.png")

    open_tab(page, "Perplexity")
    page.locator("#ppl-text textarea").fill("The wise and the foolish disguise their lack of understanding.")
    page.locator("#score").click()
    page.locator("#surprisal .surprisal-row").first.wait_for()
    assert page.locator("#surprisal .surprisal-row").count() == 3
    screenshot_is_not_blank(page, shots / "perplexity.png")

    open_tab(page, "Sparse attention")
    page.locator("#draw-layouts").click()
    page.get_by_text("measured saved, recompute (MB)").wait_for()
    screenshot_is_not_blank(page, shots / "sparse.png")

    open_tab(page, "Generation")
    page.locator("#prompt textarea").fill("A hacker")
    page.locator("#generate").click()
    page.get_by_text("prompt tokens").wait_for()
    screenshot_is_not_blank(page, shots / "generation.png")

    open_tab(page, "Cleaning")
    page.locator("#check-document").click()
    page.locator("#verdict").get_by_text("Dropped").wait_for()
    screenshot_is_not_blank(page, shots / "cleaning.png")
