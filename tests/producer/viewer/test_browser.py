"""The viewer in a real headless Chromium: runs → run → violation count → row → compare.

Debian's ``chromium`` and ``chromium-driver`` (installed by
``ops/scripts/ensure-chromium.sh``, which ``.ci/run`` calls) driven by Selenium
with the driver's path given, so nothing is downloaded at run time. The server
is a real ``qfarm view`` process. Screenshots of each page land in the test's
directory and in ``/tmp/viewer-shots/``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.perf.viewer import write_synthetic_run
from producer.reports import write_summary

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SHOTS = Path("/tmp/viewer-shots")
HIGHLIGHT = "rgba(255, 224, 102, 1)"  # .evidence.cited in viewer.css

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    results = tmp_path / "results"
    write_summary(write_synthetic_run(results, "20260101-000000-aaaaaa", 30))  # draws the plots
    b = write_synthetic_run(results, "20260101-010000-bbbbbb", 30)
    rows = [json.loads(line) for line in (b / "rows.jsonl").open()]
    for r in rows[::4]:
        r["verdict"] = "STRICT" if r["verdict"] != "STRICT" else "UNGROUNDED"
    (b / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = subprocess.Popen(
        [sys.executable, "-m", "qfarm.cli", "view", str(results), "--port", "0"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        match = re.search(r"http://[\d.]+:\d+/", line)
        assert match, f"qfarm view did not start: {line!r}"
        yield match.group(0)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def browser() -> Iterator[object]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail("chromium and chromedriver are needed: run ops/scripts/ensure-chromium.sh")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: object, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    height = driver.execute_script("return document.body.scrollHeight")  # type: ignore[attr-defined]
    driver.set_window_size(1400, min(max(height + 40, 800), 4000))  # type: ignore[attr-defined]
    driver.save_screenshot(str(path))  # type: ignore[attr-defined]
    SHOTS.mkdir(exist_ok=True)
    shutil.copy(path, SHOTS / path.name)


def test_runs_run_rows_row_compare_in_chromium(server: str, browser: object, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = browser
    d.get(server)  # type: ignore[attr-defined]
    assert "Runs in" in d.title or d.find_element(By.TAG_NAME, "h1").text.startswith("Runs in")
    shot(d, tmp_path, "1-runs")
    d.find_element(By.LINK_TEXT, "20260101-000000-aaaaaa").click()
    WebDriverWait(d, 20).until(lambda drv: drv.title.startswith("run "))
    assert d.find_element(By.TAG_NAME, "h1").text.startswith("Run 20260101-000000-aaaaaa")
    loaded = "return Array.from(document.images).filter(i => i.complete && i.naturalWidth).length"
    WebDriverWait(d, 20).until(lambda drv: drv.execute_script(loaded) == 2)
    shot(d, tmp_path, "2-run")

    link = d.find_element(By.PARTIAL_LINK_TEXT, "CITATION_MISMATCH ")
    count = int(link.text.split()[-1])
    link.click()
    WebDriverWait(d, 20).until(lambda drv: drv.title.startswith("rows of "))
    assert int(d.find_element(By.ID, "matched").text) == count
    cells = d.find_elements(By.CSS_SELECTOR, "table.rows tbody tr td:nth-child(8)")
    assert len(cells) == min(count, 50)
    assert all(c.text == "CITATION_MISMATCH" for c in cells)
    shot(d, tmp_path, "3-rows")

    d.find_element(By.CSS_SELECTOR, "table.rows tbody tr td a").click()
    WebDriverWait(d, 20).until(lambda drv: drv.title.startswith("row "))
    cited = d.find_elements(By.CSS_SELECTOR, ".evidence.cited")
    assert cited, "no evidence block highlighted"
    pointer = d.find_element(By.CSS_SELECTOR, "a.cite mark")
    eid = pointer.text.strip("[]")
    block = d.find_element(By.ID, f"ev-{eid}")
    assert "cited" in block.get_attribute("class")
    assert block.value_of_css_property("background-color") == HIGHLIGHT
    assert pointer.value_of_css_property("background-color") == HIGHLIGHT
    shot(d, tmp_path, "4-row")

    d.get(server + "compare")  # type: ignore[attr-defined]
    d.find_element(By.CSS_SELECTOR, "select[name=a] option[value='20260101-000000-aaaaaa']").click()
    d.find_element(By.CSS_SELECTOR, "select[name=b] option[value='20260101-010000-bbbbbb']").click()
    d.find_element(By.CSS_SELECTOR, "form.filters button").click()
    WebDriverWait(d, 20).until(lambda drv: drv.title.startswith("compare 2026"))
    heading = d.find_element(By.XPATH, "//h2[starts-with(., 'Verdicts that changed')]").text
    assert int(heading.split("(")[1].rstrip(")")) > 0
    assert d.find_elements(By.CSS_SELECTOR, "table.compare tbody tr")
    shot(d, tmp_path, "5-compare")
