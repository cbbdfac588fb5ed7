"""A cached row re-issued for another run carries that run's question scope."""

from __future__ import annotations

from qfarm.common.grounding.rows import build_row
from qfarm.common.jobs import expand_jobs
from qfarm.common.models import JobRecord, Mode, Question
from qfarm.common.policy import Policy
from qfarm.worker.flow import row_from_cache


def test_a_cache_hit_takes_the_scope_of_the_question_file_that_asked() -> None:
    def job(scope):
        q = Question(id="q1", text="List all members of the Beatles", scope=scope)
        return next(iter(expand_jobs("r", [q], [Mode.QUOTE], 1, Policy(), model="m")))

    cached = build_row(JobRecord(job=job(None))).model_dump(mode="json")
    row = row_from_cache(cached, JobRecord(job=job("bounded")))
    assert row.question_scope == "bounded"
