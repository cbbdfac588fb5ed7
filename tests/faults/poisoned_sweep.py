"""A followed sweep with one question no UTF-8 serialiser accepts (a lone surrogate),
submitted through the library past the question loader (which refuses such a question):
``python tests/faults/poisoned_sweep.py QUESTIONS.json N``, run by
test_poisoned_question.py in a process of its own, so a run that never ends can be killed.

QUESTIONS.json is a list of [id, text]; JSON keeps the surrogate escaped on disk.
Prints the run id and its status; exits 0 when the run completed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import qfarm.producer.runs.types
from qfarm.common.models import Question
from qfarm.producer import QuestionSet, SweepSpec, run_sweep


def main(path: str, n: int) -> int:
    # The producer checks every question again before it plans a run; the job this test is
    # about is one that reached a worker anyway (an older producer, a hand-made message), so
    # that check is taken out of this process.
    qfarm.producer.runs.types.check_question = lambda text, *_args, **_kw: text  # type: ignore[assignment]
    pairs = json.loads(Path(path).read_text())
    # model_construct: what the loader would have built, without any check on the text.
    questions = [Question.model_construct(id=qid, text=text) for qid, text in pairs]
    spec = SweepSpec(questions=QuestionSet(questions=questions, source=path, digest="poisoned"), n=n)
    result = run_sweep(spec, say=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps({"run_id": result.manifest.run_id, "status": result.status}), flush=True)
    return 0 if result.status == "complete" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
