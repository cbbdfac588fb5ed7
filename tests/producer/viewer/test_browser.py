"""The viewer in a real headless Chromium: runs → run → violation count → rows → row → compare.

The runs are real (``conftest.py``: the pipeline's stages over a small embedded index),
two on disk, one detached (a directory without rows.jsonl yet) and one only in Redis (the
test Redis, a database of the viewer's own), whose progress bar must follow rows that
land while the page is open. The rows table sorts by a clicked header both ways, keeps
"failures only" with the sort, and its CSV and JSONL exports hold exactly the rows shown.
On the row page the cited claim's matched span must be a highlighted element inside the
passage's text, and the question's gold answers and the match are shown.

Debian's ``chromium`` and ``chromium-driver`` (installed by
``ops/scripts/ensure-chromium.sh``, which ``.ci/run`` calls) driven by Selenium
with the driver's path given, so nothing is downloaded at run time. The server
is a real ``qfarm view`` process. Screenshots of each page land in the test's
directory and in ``/tmp/viewer-shots/``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bench.perf.viewer import write_synthetic_run
from qfarm.common.vocab import Mode
from qfarm.producer.reports.summary import write_summary

from .conftest import GOLD, write_question_file

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SHOTS = Path("/tmp/viewer-shots")
HIGHLIGHT = "rgba(255, 224, 102, 1)"  # mark.hl and the answer's [E#] marks in viewer.css
# The test Redis (tests/producer/conftest.py reads the same variable; read before the
# autouse fixture clears QFARM_*); a database of the viewer's own, only its run's keys touched.
TEST_PORT = int(os.environ.get("QFARM_TEST_REDIS_PORT", "6379"))
VIEWER_DB = 13
RUN_A, RUN_B = "20260101-000000-aaaaaa", "20260101-010000-bbbbbb"
REDIS_RUN = "20260101-020000-redis0"
DETACHED = "20260101-030000-detach"
PARIS_SPAN = "The Seine flows through Paris and into the English Channel"
CHANGED = {  # run B's answers that change a verdict
    ("q2", Mode.CLAIM_LATTICE_POINTER): "The Rhine flows into the North Sea. [{curie}]",
    ("q1", Mode.QUOTE): '"The Seine is the longest river in Europe" [{seine}]',
}

pytestmark = pytest.mark.slow


@pytest.fixture
def redis_run(real_rows: Callable) -> Iterator[tuple[str, Callable[[], None]]]:
    """A run that exists only in Redis, 4 of its 9 rows landed; yields the URL of its database
    and a function that lands the rest. Only this run's keys are written and deleted."""
    import redis

    from qfarm.producer.store import ProducerStore
    from qfarm.worker.store import WorkerStore

    url = f"redis://127.0.0.1:{TEST_PORT}/{VIEWER_DB}"
    client = redis.Redis.from_url(url)

    def clean() -> None:
        for key in client.scan_iter(match=f"qfarm:run:{REDIS_RUN}:*"):
            client.delete(key)
        client.zrem("qfarm:runs", REDIS_RUN)

    clean()
    manifest, rows = real_rows(REDIS_RUN)
    ProducerStore(client).put_manifest(manifest)
    WorkerStore(client).write_rows(rows[:4])
    try:
        yield url, lambda: WorkerStore(client).write_rows(rows[4:]) and None
    finally:
        clean()


@pytest.fixture
def server(tmp_path: Path, real_run: Callable[..., Path], real_index: Path,
           redis_run: tuple[str, Callable[[], None]]) -> Iterator[str]:
    run_a = real_run(RUN_A)
    # its question file, with the gold answers the row page shows, is on this host
    qfile, digest = write_question_file(tmp_path / "viewer-cases.jsonl")
    manifest = json.loads((run_a / "manifest.json").read_text())
    manifest.update(question_file=qfile, question_file_digest=digest)
    (run_a / "manifest.json").write_text(json.dumps(manifest))
    write_summary(run_a)  # draws the plots
    write_summary(real_run(RUN_B, CHANGED))
    detached = write_synthetic_run(tmp_path / "results", DETACHED, 2, status="running")
    (detached / "rows.jsonl").unlink()  # `qfarm sweep --detach`: no row has landed yet
    with served(tmp_path / "results", QFARM_REDIS_URL=redis_run[0],
                QFARM_INDEX_PATH=str(real_index)) as url:  # fmt: skip
        yield url


@contextmanager
def served(results: Path, *flags: str, **env_vars: str) -> Iterator[str]:
    """`qfarm view RESULTS --port 0 FLAGS` in a subprocess (QFARM_* only from ``env_vars``);
    yields its base URL, and stops it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    env.update(env_vars)
    proc = subprocess.Popen(
        [sys.executable, "-m", "qfarm.cli", "view", str(results), "--port", "0", *flags],
        stdout=subprocess.PIPE, text=True, env=env,
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


def test_runs_run_rows_row_compare_in_chromium(
    server: str, browser: object, tmp_path: Path, redis_run: tuple[str, Callable[[], None]]
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = browser
    d.get(server)  # type: ignore[attr-defined]
    assert d.find_element(By.TAG_NAME, "h1").text.startswith("Runs in")
    live = d.find_element(By.XPATH, f"//tr[td/a[text()='{REDIS_RUN}']]")
    assert "in Redis" in live.text and "SIMULATED" in live.text
    assert live.find_element(By.CSS_SELECTOR, ".count").text == "4/9"
    assert live.find_element(By.CSS_SELECTOR, ".status").text == "running"
    assert d.find_elements(By.ID, "redis-note") == []  # Redis answered: no note
    detached = d.find_element(By.XPATH, f"//tr[td/a[text()='{DETACHED}']]")
    assert detached.find_element(By.CSS_SELECTOR, ".count").text == "0/12"
    shot(d, tmp_path, "1-runs")
    redis_run[1]()  # the other rows land; the page polls and its bar follows
    WebDriverWait(d, 20).until(lambda drv: live.find_element(By.CSS_SELECTOR, ".count").text == "9/9")
    assert live.find_element(By.CSS_SELECTOR, ".status").text == "complete"
    assert live.find_element(By.TAG_NAME, "progress").get_attribute("value") == "9"

    d.find_element(By.LINK_TEXT, RUN_A).click()
    WebDriverWait(d, 20).until(lambda drv: drv.title.startswith("run "))
    assert d.find_element(By.TAG_NAME, "h1").text.startswith(f"Run {RUN_A}")
    loaded = "return Array.from(document.images).filter(i => i.complete && i.naturalWidth).length"
    WebDriverWait(d, 20).until(lambda drv: drv.execute_script(loaded) == 2)
    shot(d, tmp_path, "2-run")

    link = d.find_element(By.PARTIAL_LINK_TEXT, "CITATION_MISMATCH ")
    count = int(link.text.split()[-1])
    link.click()
    WebDriverWait(d, 20).until(lambda drv: drv.title.startswith("rows of "))
    assert int(d.find_element(By.ID, "matched").text) == count == 1
    cells = d.find_elements(By.CSS_SELECTOR, "table.rows tbody tr td:nth-child(8)")
    assert [c.text for c in cells] == ["CITATION_MISMATCH"]
    shot(d, tmp_path, "3-rows")

    rows_table(d, server, tmp_path)
    d.get(f"{server}runs/{RUN_A}/rows?kind=CITATION_MISMATCH")  # type: ignore[attr-defined]
    d.find_element(By.CSS_SELECTOR, "table.rows tbody tr td a").click()
    WebDriverWait(d, 20).until(lambda drv: drv.title.startswith("row "))
    assert d.find_element(By.ID, "reproduced")
    assert d.find_element(By.ID, "gold-match").text == "the answer matched a gold answer"
    assert [li.text for li in d.find_elements(By.CSS_SELECTOR, "ul.gold li")] == list(GOLD["q1"])
    assert re.search(r"^tokens \d+ \(\d+ prompt \+ \d+ completion\)$",
                     d.find_element(By.XPATH, "//tr[td[1]='tokens']").text, re.M)
    pointer = d.find_element(By.CSS_SELECTOR, "a.cite mark")
    eid = pointer.text.strip("[]")
    block = d.find_element(By.ID, f"ev-{eid}")
    assert "cited" in block.get_attribute("class")
    span = block.find_element(By.CSS_SELECTOR, ".text mark.hl")  # inside the passage's text
    assert span.text == PARIS_SPAN
    assert span.value_of_css_property("background-color") == HIGHLIGHT
    assert block.value_of_css_property("background-color") != HIGHLIGHT  # the span stands out
    assert PARIS_SPAN in block.find_element(By.CSS_SELECTOR, ".text").text
    assert pointer.value_of_css_property("background-color") == HIGHLIGHT
    claims = d.find_elements(By.CSS_SELECTOR, "table.claims tbody tr")
    assert len(claims) == 2 and "CITATION_MISMATCH" in claims[1].text
    shot(d, tmp_path, "4-row")
    claims[0].find_element(By.PARTIAL_LINK_TEXT, eid).click()  # the claim links to its span
    assert d.execute_script("return location.hash") == "#c1-0"  # type: ignore[attr-defined]

    d.get(server + "compare")  # type: ignore[attr-defined]
    d.find_element(By.CSS_SELECTOR, f"select[name=a] option[value='{RUN_A}']").click()
    d.find_element(By.CSS_SELECTOR, f"select[name=b] option[value='{RUN_B}']").click()
    d.find_element(By.CSS_SELECTOR, "form.filters button").click()
    WebDriverWait(d, 20).until(lambda drv: drv.title.startswith("compare 2026"))
    heading = d.find_element(By.XPATH, "//h2[starts-with(., 'Verdicts that changed')]").text
    assert int(heading.split("(")[1].rstrip(")")) == 2
    assert d.find_elements(By.CSS_SELECTOR, "table.compare tbody tr")
    shot(d, tmp_path, "5-compare")

    d.get(f"{server}runs/{REDIS_RUN}/rows/0")  # type: ignore[attr-defined]
    WebDriverWait(d, 20).until(lambda drv: drv.title.startswith("row "))
    assert d.find_element(By.CSS_SELECTOR, ".text mark.hl").text == PARIS_SPAN
    shot(d, tmp_path, "6-redis-row")

    sidecar = 6  # q3 in claim_lattice_pointer mode: a denial while the passage names albums
    d.get(f"{server}runs/{RUN_A}/rows/{sidecar}")  # type: ignore[attr-defined]
    WebDriverWait(d, 20).until(lambda drv: drv.title.startswith("row "))
    cands = d.find_elements(By.CSS_SELECTOR, ".evidence .text mark.cand")
    assert [c.text for c in cands] == ["Abbey Road", "Revolver", "Let It Be"]
    shot(d, tmp_path, "7-sidecar-row")


LATENCY, GOLD_COL = 11, 13  # columns of the rows table (1-based, as CSS counts)


def rows_table(d: object, server: str, tmp_path: Path) -> None:
    """All of run A's rows: sort by latency both ways, "failures only", export what is shown."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    rows = [json.loads(line) for line in (tmp_path / "results" / RUN_A / "rows.jsonl").open()]
    d.get(f"{server}runs/{RUN_A}/rows")  # type: ignore[attr-defined]

    def column(n: int) -> list[str]:
        return [c.text for c in d.find_elements(  # type: ignore[attr-defined]
            By.CSS_SELECTOR, f"table.rows tbody tr td:nth-child({n})")]

    golds = column(GOLD_COL)
    assert golds.count("match") == sum(r["gold_in_claims"] is True for r in rows) > 0
    for arrow, order in (("▲", False), ("▼", True)):
        d.find_element(By.CSS_SELECTOR, "a.sort[data-sort=latency]").click()  # type: ignore[attr-defined]
        WebDriverWait(d, 20).until(lambda drv, a=arrow: a in drv.find_element(
            By.CSS_SELECTOR, "a.sort[data-sort=latency]").text)
        shown = [float(x.replace(",", "")) for x in column(LATENCY)]
        assert shown == sorted(shown, reverse=order) and len(shown) == len(rows)
    shot(d, tmp_path, "3b-rows-sorted")
    d.find_element(By.NAME, "failures").click()  # type: ignore[attr-defined]
    d.find_element(By.CSS_SELECTOR, "form.filters button").click()  # type: ignore[attr-defined]
    WebDriverWait(d, 20).until(lambda drv: "failures=1" in drv.current_url)
    failures = [r for r in rows if r["error"] or r["verdict"] in (None, "UNGROUNDED")
                or r["gold_in_claims"] is False]
    assert int(d.find_element(By.ID, "matched").text) == len(failures) > 0  # type: ignore[attr-defined]
    shown = [float(x.replace(",", "")) for x in column(LATENCY)]
    assert shown == sorted(shown, reverse=True)  # the filter kept the sort
    shot(d, tmp_path, "3c-rows-failures")
    fetch = ("const done = arguments[arguments.length - 1];"
             "fetch(document.getElementById(arguments[0]).href)"
             ".then(r => r.text()).then(done, e => done('failed: ' + e));")
    exported = d.execute_async_script(fetch, "export-csv")  # type: ignore[attr-defined]
    table = list(csv.DictReader(io.StringIO(exported)))
    assert sorted(t["job_id"] for t in table) == sorted(r["job_id"] for r in failures)
    assert [float(t["total_ms"]) for t in table] == sorted(
        (r["timings"]["total_ms"] for r in failures), reverse=True)
    lines = d.execute_async_script(fetch, "export-jsonl").splitlines()  # type: ignore[attr-defined]
    assert [json.loads(x)["job_id"] for x in lines] == [t["job_id"] for t in table]
