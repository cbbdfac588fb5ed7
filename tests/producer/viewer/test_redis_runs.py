"""Runs that exist only in Redis, and a viewer whose Redis is absent or down."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import fakeredis
import pytest
import redis

from qfarm.common import keys
from qfarm.common.models import Row
from qfarm.producer.store import ProducerStore
from qfarm.producer.viewer.router import Viewer
from qfarm.worker.store import WorkerStore

RUN = "20260102-000000-redis1"


@pytest.fixture
def store() -> ProducerStore:
    return ProducerStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()))


def put_run(store: ProducerStore, real_rows: Callable, run_id: str, n_rows: int) -> list[Row]:
    """A run as a producer on another host leaves it: its manifest and the first rows."""
    manifest, rows = real_rows(run_id)
    store.put_manifest(manifest)
    WorkerStore(store.client).write_rows(rows[:n_rows])
    return rows


def get(viewer: Viewer, path: str, **query: str) -> str:
    resp = viewer.handle(path, query)
    assert resp.status == 200, resp.body[:400]
    return resp.body.decode()


def test_the_store_finds_every_manifest_by_scan(store: ProducerStore, real_rows: Callable) -> None:
    for run_id in ("r-b", "r-a", "r-c"):
        put_run(store, real_rows, run_id, 0)
    store.client.set("qfarm:run:r-x:rows-extra", b"{}")  # another key of a run: not a manifest
    assert store.manifest_run_ids(batch=1) == ["r-a", "r-b", "r-c"]


def test_a_redis_only_run_is_listed_live_with_its_progress(
    store: ProducerStore, real_rows: Callable, tmp_path: Path
) -> None:
    put_run(store, real_rows, RUN, 4)
    viewer = Viewer(tmp_path, store)
    html = get(viewer, "/")
    row = re.search(rf"<tr><td><a href=\"/runs/{RUN}\">.*?</tr>", html).group(0)
    assert "in Redis" in row and "SIMULATED" in row
    assert 'data-live="1"' in row and ">running<" in row
    assert '<progress max="9" value="4">' in row and "4/9" in row
    # A live run has no end yet: its last row's time is not shown as "finished".
    assert row.count("UTC") == 1  # started only
    assert "redis-note" not in html
    progress = json.loads(viewer.handle("/api/progress", {"run": RUN}).body)
    assert progress == {"run": RUN, "rows": 4, "jobs": 9, "status": "running", "status_text": "running"}


def test_run_rows_and_row_pages_read_a_redis_only_run(
    store: ProducerStore, real_rows: Callable, real_index: Path, tmp_path: Path
) -> None:
    rows = put_run(store, real_rows, RUN, 9)
    viewer = Viewer(tmp_path, store, index_path=real_index)
    run_html = get(viewer, f"/runs/{RUN}")
    assert "9/9" in run_html and ">complete<" in run_html and "has no directory in" in run_html
    link = re.search(r'<a href="([^"]*kind=CITATION_MISMATCH[^"]*)">CITATION_MISMATCH 1</a>',
                     run_html)
    assert link, "the violation count links to its rows"
    rows_html = get(viewer, f"/runs/{RUN}/rows", mode="claim_lattice_pointer",
                    kind="CITATION_MISMATCH")
    assert '<span id=matched>1</span> of 9 rows' in rows_html
    pos = int(re.search(rf'href="/runs/{RUN}/rows/(\d+)"', rows_html).group(1))
    row_html = get(viewer, f"/runs/{RUN}/rows/{pos}")
    assert rows[0].question in row_html and 'id="reproduced"' in row_html
    assert '<mark class="hl" id="c1-0"' in row_html


def test_a_redis_runs_export_streams_the_selected_rows_in_order(
    store: ProducerStore, real_rows: Callable, tmp_path: Path
) -> None:
    # The index keeps log positions, not job ids: the export finds each job in the log.
    rows = put_run(store, real_rows, RUN, 9)
    viewer = Viewer(tmp_path, store)
    resp = viewer.handle(f"/runs/{RUN}/rows.jsonl", {"sort": "mode", "desc": "1"})
    got = [json.loads(line)["job_id"] for line in b"".join(resp.stream or ()).splitlines()]
    landed = [r.job_id for r in rows]
    want = sorted(landed, key=lambda j: next(r.mode for r in rows if r.job_id == j),
                  reverse=True)
    assert got == want and len(got) == 9
    resp = viewer.handle(f"/runs/{RUN}/rows.jsonl", {"mode": rows[4].mode})
    got = [json.loads(line)["job_id"] for line in b"".join(resp.stream or ()).splitlines()]
    assert got == [r.job_id for r in rows if r.mode == rows[4].mode]


def test_a_redis_run_grows_as_rows_land(store: ProducerStore, real_rows: Callable, tmp_path: Path) -> None:
    rows = put_run(store, real_rows, RUN, 2)
    viewer = Viewer(tmp_path, store)
    assert "<span id=matched>2</span>" in get(viewer, f"/runs/{RUN}/rows")
    WorkerStore(store.client).write_rows(rows[2:5])
    assert "<span id=matched>5</span>" in get(viewer, f"/runs/{RUN}/rows")
    assert rows[4].question in get(viewer, f"/runs/{RUN}/rows/4")


def test_a_run_on_disk_is_read_from_disk_and_listed_once(
    store: ProducerStore, real_rows: Callable, real_run: Callable[..., Path]
) -> None:
    run_dir = real_run(RUN)
    put_run(store, real_rows, RUN, 1)  # Redis still holds it, with fewer rows
    html = get(Viewer(run_dir.parent, store), "/")
    assert html.count(f'href="/runs/{RUN}"') == 1 and "in Redis" not in html
    assert "9/9" in html


def test_without_redis_the_pages_work_and_say_so_in_one_line(
    real_run: Callable[..., Path], unused_port: int
) -> None:
    run_dir = real_run(RUN)
    html = get(Viewer(run_dir.parent), "/")
    assert "No Redis configured" in html and f'href="/runs/{RUN}"' in html
    down = Viewer(run_dir.parent, redis_url=f"redis://127.0.0.1:{unused_port}/0")
    html = get(down, "/")
    note = re.search(r'<p class="note" id="redis-note">(.*?)</p>', html).group(1)
    assert f"127.0.0.1:{unused_port}" in note and "not reachable" in note
    assert f'href="/runs/{RUN}"' in html
    assert get(down, f"/runs/{RUN}").count("<h2>") > 3
    missing = down.handle("/runs/not-a-run", {})
    assert missing.status == 404 and b"not reachable" in missing.body


def test_redis_going_down_mid_session_is_a_note_not_an_error(
    store: ProducerStore, real_rows: Callable, tmp_path: Path
) -> None:
    put_run(store, real_rows, RUN, 3)
    viewer = Viewer(tmp_path, store)
    assert f'href="/runs/{RUN}"' in get(viewer, "/")  # the run's rows are indexed from here on

    def gone(*_: object) -> None:
        raise redis.ConnectionError("Connection reset by peer")

    with pytest.MonkeyPatch.context() as mp:  # Redis fails between reading the run and its row
        mp.setattr(store, "rows_for", gone)
        resp = viewer.handle(f"/runs/{RUN}/rows/1", {})
    assert resp.status == 503 and b"not reachable" in resp.body and b"runs on disk" in resp.body
    viewer = Viewer(tmp_path, store)
    store.client.connection_pool.connection_kwargs["server"].connected = False  # fakeredis: down
    html = get(viewer, "/")
    assert "not reachable" in html and f'href="/runs/{RUN}"' not in html
    assert viewer.handle(f"/runs/{RUN}", {}).status == 404


def test_single_questions_are_listed_apart_and_left_out_of_the_compare_picker(
    store: ProducerStore, real_rows: Callable, tmp_path: Path
) -> None:
    from bench.perf.viewer import write_synthetic_run

    ask = "ask-20260102-000000-aaaaaa"
    rows = put_run(store, real_rows, ask, 1)
    write_synthetic_run(tmp_path, "20260101-000000-sweep1", 2)
    viewer = Viewer(tmp_path, store)
    html = get(viewer, "/")
    sweeps, _, asks = html.partition('<h2 id="asks">Single questions (1)</h2>')
    assert "20260101-000000-sweep1" in sweeps and ask not in sweeps
    assert f'href="/runs/{ask}/rows/0">{ask}</a>' in asks and rows[0].question in asks
    picker = get(viewer, "/compare")
    assert "20260101-000000-sweep1" in picker and ask not in picker


def test_the_store_names_the_job_at_log_positions_near_or_far(store: ProducerStore) -> None:
    # The index keeps log positions; an export looks up near ones in one range, far ones
    # one by one, and a position past the log's end has no job.
    store.client.rpush(keys.log_key(RUN), *[f"job{k}" for k in range(50)])
    assert store.log_ids_at(RUN, [3, 1, 2, 60]) == ["job3", "job1", "job2", None]
    assert store.log_ids_at(RUN, [49, 0, 60]) == ["job49", "job0", None]
    assert store.log_ids_at(RUN, []) == []


def test_runs_are_listed_newest_first_across_redis_and_disk(
    store: ProducerStore, real_rows: Callable, real_run: Callable[..., Path]
) -> None:
    """A run only in Redis that began before a run on disk is listed after it."""
    put_run(store, real_rows, RUN, 2)  # begun first
    older = "20260101-000000-older0"
    newer = "20260103-000000-newer0"
    run_dir = real_run(newer)
    older_dir = real_run(older)
    for d, at in ((older_dir, 1_000.0), (run_dir, 4_000_000_000.0)):  # 1970 and 2096
        path = d / "manifest.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "created_at": at}))
        status = d / "status.json"
        status.write_text(json.dumps({**json.loads(status.read_text()), "started_at": at}))
    html = get(Viewer(run_dir.parent, store), "/")
    listed = re.findall(r'<tr><td><a href="/runs/([^"]+)"', html)
    assert listed == [newer, RUN, older]


def test_a_single_question_that_errored_reads_as_errored(
    store: ProducerStore, real_rows: Callable, tmp_path: Path
) -> None:
    from qfarm.common.vocab import ErrorKind

    ask = "ask-20260102-000000-errord"
    manifest, rows = real_rows(ask)
    store.put_manifest(manifest.model_copy(update={"n_jobs": 1}))
    failed = rows[0].model_copy(update={"error": "llm: endpoint timed out", "verdict": None,
                                        "error_kind": ErrorKind.LLM, "label": None,
                                        "ratio": None})
    WorkerStore(store.client).write_rows([failed])
    _, _, asks = get(Viewer(tmp_path, store), "/").partition('<h2 id="asks">')
    assert '<span class="status errored">completed with errors (1, 100.0 %)</span>' in asks
