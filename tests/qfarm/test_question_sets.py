"""The question sets ship with qfarm and are named from any folder; runs land in ./qfarm-runs.

A user who installed qfarm has no bench/questions/ beside them: `qfarm sweep smoke` must
find the shipped set, and the built wheel must carry the sets and leave bench/ out.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from qfarm import question_sets
from qfarm.cli import main
from qfarm.common.errors import InputError
from qfarm.common.questions import parse_questions

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "bench" / "questions"
QFARM = str(Path(sys.executable).parent / "qfarm")


def test_sets_lists_every_shipped_set_with_its_question_count(capsys) -> None:
    assert main(["sets"]) == 0
    out = capsys.readouterr().out
    names = {line.split()[0]: int(line.split()[1]) for line in out.splitlines()}
    on_disk = sorted(p for p in SOURCE.iterdir() if p.suffix in (".jsonl", ".txt"))
    assert sorted(names) == sorted(p.stem for p in on_disk)
    smoke = SOURCE / "smoke.txt"
    assert names["smoke"] == len(parse_questions(str(smoke), smoke.read_text(encoding="utf-8")))


def test_a_set_is_named_from_any_folder(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert question_sets.resolve(Path("smoke")) == SOURCE / "smoke.txt"
    assert question_sets.resolve(Path("general.jsonl")) == SOURCE / "general.jsonl"
    (tmp_path / "smoke").write_text("What is jazz?\n")
    assert question_sets.resolve(Path("smoke")) == Path("smoke")  # a file of that name wins
    assert question_sets.resolve(Path("sub/smoke")) == Path("sub/smoke")  # a path is a path
    assert question_sets.resolve(Path("missing.txt")) == Path("missing.txt")  # the reader says
    with pytest.raises(InputError, match=r"smok: no such question file, nor a shipped .*qfarm sets"):
        question_sets.resolve(Path("smok"))


def test_settings_put_runs_under_qfarm_runs_of_the_current_folder(monkeypatch) -> None:
    from qfarm.common.settings import Settings

    monkeypatch.delenv("QFARM_RESULTS_DIR", raising=False)
    assert Settings().results_dir == Path("qfarm-runs")


@pytest.mark.slow
def test_sweep_of_a_shipped_set_from_another_folder_writes_qfarm_runs(env, tmp_path) -> None:
    del env["QFARM_RESULTS_DIR"]
    where = tmp_path / "elsewhere"
    where.mkdir()
    res = subprocess.run([QFARM, "sweep", "bounded_universal", "--eager", "-n", "1",
                          "--modes", "quote", "--quiet"], cwd=where, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    runs = list((where / "qfarm-runs").iterdir())
    assert len(runs) == 1 and sorted(p.name for p in where.iterdir()) == ["qfarm-runs"]
    rows = [json.loads(line) for line in (runs[0] / "rows.jsonl").read_text().splitlines()]
    src = SOURCE / "bounded_universal.jsonl"
    assert len(rows) == len(parse_questions(str(src), src.read_text(encoding="utf-8")))


@pytest.mark.slow
def test_the_wheel_ships_the_question_sets_and_not_bench(tmp_path) -> None:
    src = tmp_path / "src"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                             check=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    # pip builds in isolation with the setuptools pyproject.toml asks for (pip's cache)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "-q", "-w", str(tmp_path / "dist"), str(src)], check=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("qfarm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n.removeprefix("qfarm/sets/") for n in names if n.startswith("qfarm/sets/"))
    assert shipped == sorted(p.name for p in SOURCE.iterdir() if p.suffix in (".jsonl", ".txt"))
    assert not [n for n in names if n.startswith("bench/")]
    assert any(n.endswith("ops/sim/server.py") for n in names)  # the simulator ships: a feature
