"""release-report.html in a real browser (issue 44): Debian's chromium driven by Playwright opens the page of the
bundled example's release and of a release whose accuracy gate failed. The page loads with no console error and no
request but its own file, every section is there, every chart has as many marks as the figures it draws, and every
link leads to a file that exists. A screenshot of each is kept in $COMPILE_TEST_ARTIFACTS (a CI artifact)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from compiler.core.progress import phase_summary
from compiler.report.page import SECTIONS
from tests.support.cli import run_cli

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# As the machine's probe starts it: no sandbox as root, and none of the background traffic a closed network refuses.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]  # fmt: skip


def open_page(page_path: Path, screenshot: str) -> dict:
    """The page as chromium shows it: console errors, requests, sections, marks per chart, links, fill colours."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).is_file():
        pytest.fail("chromium is not installed: apt-get install chromium (.ci/run does)", pytrace=False)
    seen: dict = {"errors": [], "requests": []}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.on("console", lambda m: seen["errors"].append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: seen["errors"].append(str(e)))
        page.on("request", lambda r: seen["requests"].append(r.url))
        page.goto(page_path.resolve().as_uri(), wait_until="load")
        seen["sections"] = page.eval_on_selector_all("section[id]", "els => els.map(e => e.id)")
        seen["marks"] = page.eval_on_selector_all("[id^=mark-]", "els => els.map(e => e.id.replace(/-\\d+$/, ''))")
        seen["links"] = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
        seen["badge"] = page.eval_on_selector_all(".badge", "els => els.map(e => e.className)")
        seen["failed_cells"] = page.eval_on_selector_all("td .failed", "els => els.length")
        folder = Path(os.environ.get("COMPILE_TEST_ARTIFACTS") or page_path.parent)
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / screenshot), full_page=True)
        browser.close()
    return seen


def _marks(seen: dict, chart: str) -> int:
    return seen["marks"].count(f"mark-{chart}")


def test_the_example_release_page_loads_offline_with_every_section_chart_and_link(released: Path) -> None:
    page = released / "release-report.html"
    assert page.is_file() and page.stat().st_size < 2 << 20  # self-contained, under 2 MB
    view = json.loads(run_cli("report", released, "--json").stdout)
    seen = open_page(page, "release-report-example.png")
    assert seen["errors"] == []
    assert seen["requests"] == [page.resolve().as_uri()]  # nothing fetched but the page itself
    assert seen["sections"] == list(SECTIONS)
    assert seen["badge"] == ["badge ok"]
    for gate in ("min-cosine", "min-sqnr", "min-top1"):
        assert _marks(seen, f"accuracy-{gate}") == sum(f["gate"] == gate for f in view["figures"]) > 0, gate
    assert _marks(seen, "sizes") == len(view["engines"]) == 6
    assert _marks(seen, "timeline") == len(view["stages"]) == 5
    assert _marks(seen, "sensitivity-int8") == len(view["calibrations"][0]["sensitive"]) > 0
    made = view["calibrations"][0]  # what each phase of making the int8 calibration took, on the page
    assert set(made["phases"]) == {"quantize", "build proof", "sensitivity", "held-out comparison"}
    assert phase_summary(made["seconds"], made["phases"]) in page.read_text()
    assert seen["links"], "no link on the page"
    for link in seen["links"]:
        target = Path(unquote(urlsplit(link).path))
        assert target.is_file(), link


def test_a_release_whose_gate_failed_is_shown_failed_in_red(failed_release: Path) -> None:
    failed = failed_release
    page = failed / "release-report.html"
    seen = open_page(page, "release-report-failed.png")
    assert seen["errors"] == [] and seen["requests"] == [page.resolve().as_uri()]
    assert seen["badge"] == ["badge failed"]
    assert seen["failed_cells"] > 0
    fills = re.findall(r'<g id="mark-accuracy-min-cosine-\d+">.*?fill: ?(#[0-9a-f]{6})', page.read_text(), re.S)
    verdicts = [f["passed"] for f in json.loads(run_cli("report", failed, "--json").stdout)["figures"]
                if f["gate"] == "min-cosine"]  # fmt: skip
    assert fills == ["#c62828" if v is False else "#2e7d32" if v else "#546e7a" for v in verdicts]
    assert "#c62828" in fills  # a failed figure's bar is drawn red
    view = json.loads(run_cli("report", failed, "--json").stdout)
    assert view["passed"] is False and any("min-cosine" in f or "cosine" in f for f in view["failures"])


def test_a_signed_release_says_by_which_key_and_a_regression_shows_red(released, tmp_path):
    """The summary names the signing key's hint of a signed release; a page compared with a better previous
    version shows the regression in red in the browser."""
    from tests.support.keys import write_keys

    (tmp_path / "keys").mkdir()
    keys = write_keys(tmp_path / "keys")
    store = tmp_path / "store"
    build = released / "builds" / "rtx-4090"
    signed = run_cli("publish", build, "--store", store, "--name", "digits", "--version", "2.0.0",
                     "--sign-key", keys["p256"])  # fmt: skip
    assert signed.exit_code == 0, signed.stderr
    view = json.loads(
        run_cli("report", "digits@2.0.0", "--store", store, "--json", "--out", tmp_path / "p.html").stdout
    )
    assert view["signed"].startswith("signed by key ") and "compile verify --key" in view["signed"]
    worse = tmp_path / "worse"
    shutil.copytree(released, worse)
    check = worse / "builds" / "rtx-4090" / "check.json"
    record = json.loads(check.read_text())
    [engine] = [e for e in record["engines"] if e["precision"] == "int8"]
    next(c for c in engine["checks"] if c["name"] == "accuracy")["figures"]["logits"]["sqnr_db"] -= 5.0
    check.write_text(json.dumps(record))
    page = tmp_path / "diff.html"
    assert run_cli("report", worse, "--previous", released, "--out", page).exit_code == 0
    seen = open_page(page, "release-report-regression.png")
    assert seen["errors"] == [] and seen["requests"] == [page.resolve().as_uri()]
    assert "1 regression(s)" in page.read_text()
    assert re.search(r"<tr class='failed'><td>rtx-4090/int8 logits</td><td>min-sqnr</td>", page.read_text())
