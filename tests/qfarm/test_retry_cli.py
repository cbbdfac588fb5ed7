"""`qfarm sweep --retry-errors` refuses what it cannot do before anything runs."""

from __future__ import annotations

from qfarm.cli import main


def test_retry_errors_takes_the_runs_own_questions(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("QFARM_RESULTS_DIR", str(tmp_path))
    assert main(["sweep", "--retry-errors", "RUN", "questions.txt"]) == 2
    assert "give it alone" in capsys.readouterr().err
    assert main(["sweep", "--retry-errors", "RUN", "--resume", "RUN"]) == 2


def test_retry_errors_of_an_unknown_run_says_where_it_looked(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("QFARM_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("QFARM_LLM_ENDPOINTS", "http://127.0.0.1:9")
    assert main(["sweep", "--retry-errors", "no-such-run", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no manifest" in err and str(tmp_path / "no-such-run") in err
    assert not (tmp_path / "no-such-run").exists()
