"""The viewer's plots as a reader sees them, in a real headless Chromium: each mark's drawn
size stands for its number, a hostile question stays text inside a plot, and a browser
without a token is shown how to log in and can.

Runs on disk only (``qfarm view --no-redis``); the browser as in ``test_browser.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.perf.viewer import write_synthetic_run
from qfarm.producer.reports.rows import read_stats

from .test_browser import browser, served, shot  # noqa: F401  (the Chromium fixture)

pytestmark = pytest.mark.slow

RUN_A, RUN_B = "20260103-000000-plotsa", "20260103-010000-plotsb"
# Closes the SVG text it lands in and opens a script, or runs one from an attribute.
HOSTILE = '</text></svg><script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
TOKEN = "plots-token-0123456789abcdef"


def make_runs(results: Path) -> None:
    write_synthetic_run(results, RUN_A, 6)
    run_b = write_synthetic_run(results, RUN_B, 6)
    rows_path = run_b / "rows.jsonl"
    rows = [json.loads(line) for line in rows_path.open()]
    for r in rows:
        if r["question_id"] == "q000000":
            r["question"] = HOSTILE
        if r["mode"] == "quote" and r["verdict"] == "UNGROUNDED":
            r["verdict"] = "STRICT"  # a better signal in quote mode
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    make_runs(tmp_path / "results")
    with served(tmp_path / "results", "--no-redis") as url:
        yield url


def _widths(d: object, selector: str) -> list[tuple[dict[str, str], float, float]]:
    """(data attributes, drawn width, drawn left) of each element ``selector`` finds."""
    script = (
        "return Array.from(document.querySelectorAll(arguments[0])).map(g => {"
        " const r = g.querySelector('rect, line.ci').getBoundingClientRect();"
        " return [Object.assign({}, g.dataset), r.width, r.left]; });")
    return [(a, w, x) for a, w, x in d.execute_script(script, selector)]  # type: ignore[attr-defined]


def test_plots_draw_their_numbers_and_keep_hostile_text_as_text_in_chromium(
    server: str, browser: object, tmp_path: Path  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = browser
    d.get(f"{server}runs/{RUN_B}")  # type: ignore[attr-defined]
    WebDriverWait(d, 20).until(lambda drv: drv.title.startswith("run "))
    stats = read_stats(tmp_path / "results" / RUN_B / "rows.jsonl")
    plot = d.find_element(By.ID, "verdict-plot")
    assert plot.is_displayed() and plot.size["width"] > 300
    segs = _widths(d, "#verdict-plot g.seg")
    assert sum(int(a["count"]) for a, _, _ in segs) == stats.rows
    # Every bar is its mode's rows end to end; each part's width is its count's share.
    per_row = [w / int(a["count"]) for a, w, _ in segs]
    assert max(per_row) == pytest.approx(min(per_row), rel=0.01)
    for mode, ms in stats.modes.items():
        drawn = sum(w for a, w, _ in segs if a["bar"] == mode)
        assert drawn == pytest.approx(per_row[0] * ms.tally.rows, rel=0.01)

    bars = _widths(d, "#kinds-plot g.bar")
    assert len(bars) == len(stats.kinds_seen) * len(stats.modes)
    # A bar's width is the share of its mode's answered rows carrying the kind.
    per_share = [w / (int(a["count"]) / stats.modes[a["series"]].tally.valid)
                 for a, w, _ in bars if int(a["count"])]
    assert per_share and max(per_share) == pytest.approx(min(per_share), rel=0.01)
    assert all(w < 0.5 for a, w, _ in bars if not int(a["count"]))

    cells = d.find_elements(By.CSS_SELECTOR, "#question-heatmap .cell")
    assert len(cells) == len(stats.questions) * len(stats.modes)
    assert d.execute_script("return window.pwned") is None  # type: ignore[attr-defined]
    assert [s.get_attribute("src") for s in d.find_elements(By.TAG_NAME, "script")] == [
        f"{server}static/viewer.js"]
    labels = d.execute_script(  # type: ignore[attr-defined]
        "return Array.from(document.querySelectorAll('#question-heatmap text > title'))"
        ".map(t => t.textContent)")
    assert f"1. {HOSTILE}" in labels  # the question, whole, as text
    shot(d, tmp_path, "plots-1-run")
    d.find_element(By.CSS_SELECTOR, "#question-heatmap a").click()  # the first cell's rows
    WebDriverWait(d, 20).until(lambda drv: drv.title.startswith("rows of "))
    assert int(d.find_element(By.ID, "matched").text) == stats.questions["q000000"].cells[
        "quote"].rows
    assert {c.text for c in d.find_elements(By.CSS_SELECTOR, "table.rows tbody td:nth-child(2)")
            } == {"q000000"}
    d.back()  # type: ignore[attr-defined]

    d.get(f"{server}compare?a={RUN_A}&b={RUN_B}")  # type: ignore[attr-defined]
    WebDriverWait(d, 20).until(lambda drv: drv.title.startswith("compare 2026"))
    floor = d.find_element(By.CSS_SELECTOR, "#forest-plot rect.floor").rect
    zero = floor["x"] + floor["width"] / 2
    rows = d.execute_script(  # type: ignore[attr-defined]
        "return Array.from(document.querySelectorAll('#forest-plot g.fp-row')).map(g => {"
        " const c = g.querySelector('circle').getBoundingClientRect();"
        " const l = g.querySelector('line.ci').getBoundingClientRect();"
        " return [g.dataset.effect, g.querySelector('title').textContent,"
        "         c.left + c.width / 2, l.left, l.right]; });")
    assert rows and any(effect == "better" for effect, *_ in rows)
    for effect, tip, x, left, right in rows:
        delta = float(tip.split("Δ ")[1].split()[0])
        assert left - 0.6 <= x <= right + 0.6  # the point sits on its interval
        if abs(delta) >= 1:  # drawn on the side of zero its sign says
            assert (x > zero) == (delta > 0), tip
        if effect != "noise":
            assert abs(x - zero) > floor["width"] / 2  # a signal lies outside the floor band
    shot(d, tmp_path, "plots-2-compare")


def test_a_browser_without_a_token_is_shown_how_to_log_in_and_can(
    tmp_path: Path, browser: object  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    make_runs(tmp_path / "results")
    d = browser
    with served(tmp_path / "results", "--no-redis", QFARM_API_TOKENS=TOKEN) as url:
        d.get(f"{url}runs/{RUN_A}")  # type: ignore[attr-defined]
        assert d.title.startswith("log in")  # type: ignore[attr-defined]
        assert "QFARM_API_TOKENS" in d.find_element(By.ID, "how").text
        nav = d.find_element(By.TAG_NAME, "nav")  # styled: the page needs no other request
        assert nav.value_of_css_property("background-color") == "rgba(38, 50, 56, 1)"
        shot(d, tmp_path, "login-1")
        field = d.find_element(By.NAME, "token")
        field.send_keys("not-the-token-0123456789")
        field.submit()
        WebDriverWait(d, 20).until(lambda drv: drv.find_elements(By.ID, "invalid"))
        field = d.find_element(By.NAME, "token")
        field.send_keys(TOKEN)
        field.submit()
        WebDriverWait(d, 20).until(lambda drv: drv.title.startswith("run "))
        assert d.current_url == f"{url}runs/{RUN_A}"  # type: ignore[attr-defined]
        assert "token" not in d.current_url  # type: ignore[attr-defined]
