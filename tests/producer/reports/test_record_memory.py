"""The run record digests rows.jsonl a line at a time: its memory does not grow with the
file (it held the whole file and a list of its lines, over half a gigabyte at 100k rows)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from qfarm.producer.reports import record

# In a fresh interpreter: in the test session, threads other tests left behind (health
# pollers, metric flushers) allocate while the digest runs, and tracemalloc counts them.
PEAK = """
import sys, tracemalloc
from pathlib import Path
from qfarm.common.record import digest_rows
from qfarm.producer.reports import record
tracemalloc.start()
digest_rows(record._rows_lines(Path(sys.argv[1])))
print(tracemalloc.get_traced_memory()[1])
"""


def write_rows(path: Path, n: int) -> None:
    line = b'{"job_id": "%d", "answer": "' + b"x" * 2000 + b'"}\n'
    with path.open("wb") as fh:
        for i in range(n):
            fh.write(line % i)


def peak_of_digest(path: Path) -> int:
    out = subprocess.run([sys.executable, "-c", PEAK, str(path)], capture_output=True,
                         text=True, check=True, timeout=120)  # fmt: skip
    return int(out.stdout)


def test_the_digest_of_a_ten_times_larger_file_takes_no_more_memory(tmp_path: Path) -> None:
    small, large = tmp_path / "small.jsonl", tmp_path / "large.jsonl"
    write_rows(small, 2_000)
    write_rows(large, 20_000)  # 40 MB
    assert peak_of_digest(large) < 2 * peak_of_digest(small) + 256 * 1024


def test_lines_are_cut_as_splitlines_cuts_them(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    data = b'{"a": 1}\n{"b": 2}\r\n{"c"\r: 3}\n\n{"d": 4}'
    path.write_bytes(data)
    assert list(record._rows_lines(path)) == data.splitlines(keepends=True)
    assert list(record._rows_lines(tmp_path / "missing.jsonl")) == []
