"""A run whose rows include errors, in a real headless Chromium: the runs list and the run
page read "completed with errors (N, x %)", never "complete", and each strict-rate names
its denominator (of jobs, an error row a failure; of answered beside it).

Runs on disk only (``qfarm view --no-redis``); the browser as in ``test_browser.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.perf.viewer import write_synthetic_run

from .test_browser import browser, served, shot  # noqa: F401  (the Chromium fixture)

pytestmark = pytest.mark.slow

CLEAN, ERRORED = "20260102-000000-clean0", "20260102-010000-errord"


def make_errored(run_dir: Path, every: int) -> int:
    """Turn every ``every``-th row into an error row (an endpoint's malformed reply), and
    the others into rows with a verdict; ``every`` 0: none errors."""
    rows = [json.loads(line) for line in (run_dir / "rows.jsonl").read_text().splitlines()]
    errored = 0
    for k, row in enumerate(rows):
        is_error = bool(every) and k % every == 0
        row.update(error="llm: malformed completion body" if is_error else None,
                   error_kind="llm" if is_error else None)
        if is_error:
            row.update(verdict=None, label=None, ratio=None)
            errored += 1
        elif row["verdict"] is None:
            row.update(verdict="STRICT", label="EVIDENCE-WARRANTED", ratio=1.0)
    (run_dir / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return errored


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    results = tmp_path / "results"
    make_errored(write_synthetic_run(results, CLEAN, 10, status="complete"), 0)
    make_errored(write_synthetic_run(results, ERRORED, 10, status="complete"), 3)  # 20 of 60
    with served(results, "--no-redis") as url:
        yield url


def test_an_errored_run_reads_as_errored_in_chromium(server: str, browser: object,  # noqa: F811
                                                     tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = browser
    d.get(server)  # type: ignore[attr-defined]
    errored = d.find_element(By.XPATH, f"//tr[td/a[text()='{ERRORED}']]")
    status = errored.find_element(By.CSS_SELECTOR, ".status")
    assert status.text == "completed with errors (20, 33.3 %)"
    assert status.value_of_css_property("color") == "rgba(176, 0, 32, 1)"  # shown as an error
    clean = d.find_element(By.XPATH, f"//tr[td/a[text()='{CLEAN}']]")
    assert clean.find_element(By.CSS_SELECTOR, ".status").text == "complete"
    # quote: rows 0, 3, 6, ... of each question's 6 are errors (k % 3 == 0 over 60 rows)
    assert re.search(r"quote: \d+\.\d% of 20 jobs \(\d+\.\d% of \d+ answered\)", errored.text)
    shot(d, tmp_path, "errors-1-runs")

    d.find_element(By.LINK_TEXT, ERRORED).click()
    WebDriverWait(d, 20).until(lambda drv: drv.title.startswith("run "))
    facts = d.find_element(By.CSS_SELECTOR, "table.facts")
    assert "completed with errors (20, 33.3 %)" in facts.text
    assert "20 of 60 rows are errors (33.3 %)" in facts.text
    headers = [th.text for th in d.find_elements(By.CSS_SELECTOR, "table.verdicts th")]
    assert headers[3:5] == ["strict-rate (of jobs; errors fail)", "error rate (of jobs)"]
    assert headers[5].startswith("STRICT (of answered")
    shot(d, tmp_path, "errors-2-run")
    d.find_element(By.PARTIAL_LINK_TEXT, "20 of 60 rows are errors").click()
    WebDriverWait(d, 20).until(lambda drv: "/rows" in drv.current_url)
    assert "verdict=none" in d.current_url  # type: ignore[attr-defined]
