"""The Python API refuses bad input before anything is written, sent or started."""

from __future__ import annotations

from pathlib import Path

import pytest

from qfarm.common.errors import ConfigError, InputError
from qfarm.common.models import Question
from qfarm.common.settings import Settings
from qfarm.producer import SweepSpec, ask, run_sweep
from qfarm.producer.api import QuestionSet


def settings(tmp_path: Path) -> Settings:
    # Nothing listens on port 9: any attempt to reach Redis or an endpoint would fail
    # differently from the input errors expected here.
    return Settings(results_dir=tmp_path / "results", redis_url="redis://127.0.0.1:9/0",
                    llm_endpoints="http://127.0.0.1:9")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (SweepSpec(questions=["What is jazz?", "  "]), "<python>[1]: the question is empty"),
        (SweepSpec(questions=[]), "<python>: no questions given"),
        (SweepSpec(questions="What is jazz?"), "a str is not a list of questions"),
        (SweepSpec(questions=["What is jazz?"], modes=["quote", "qoute"]), "unknown mode 'qoute'"),
        (SweepSpec(questions=["What is jazz?"], n=0), "-n 0"),
        (SweepSpec(questions=Path("no/such/file.txt")), "no such question file"),
    ],
)
@pytest.mark.parametrize("eager", [True, False])
def test_bad_sweep_input_is_an_input_error_and_leaves_nothing(tmp_path, spec, message, eager):
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        run_sweep(spec, eager=eager, settings=settings(tmp_path))
    assert not (tmp_path / "results").exists()


def test_ask_takes_one_mode_and_a_question(tmp_path):
    with pytest.raises(InputError, match="--mode takes one mode"):
        ask("What is jazz?", "quote,claim_lattice", eager=True, settings=settings(tmp_path))
    with pytest.raises(InputError, match="the question is empty"):
        ask(" \n", eager=True, settings=settings(tmp_path))


def test_a_distributed_sweep_without_endpoints_says_how_to_set_them(tmp_path):
    bare = settings(tmp_path).model_copy(update={"llm_endpoints": ""})
    with pytest.raises(ConfigError, match="QFARM_LLM_ENDPOINTS is not set"):
        run_sweep(SweepSpec(questions=["What is jazz?"]), settings=bare)


def test_question_texts_get_stable_ids_and_a_digest_of_their_content():
    a = QuestionSet.from_texts(["What is jazz?", "Who was Hamlet?"])
    b = QuestionSet.from_texts([" What is jazz? ", "Who was Hamlet?"])
    assert [q.id for q in a.questions] == [q.id for q in b.questions]
    assert a.digest == b.digest
    assert QuestionSet.from_texts(["Who was Hamlet?", "What is jazz?"]).digest != a.digest


@pytest.mark.parametrize(
    ("questions", "message"),
    [
        (["What is jazz?", "What is \ud800?"], "<python>[1]: the question holds a lone surrogate"),
        (["What is\x00 jazz?"], "<python>[0]: the question holds a control character (U+0000)"),
        (["x" * 2001], "<python>[0]: the question is 2,001 characters; at most 2,000"),
        ([Question(id="\udc80", text="What is jazz?", source="mine")], "mine: the id holds a lone surrogate"),
    ],
)
def test_questions_given_from_python_follow_the_files_rules(questions, message) -> None:
    with pytest.raises(InputError) as info:
        QuestionSet.from_texts(questions)
    assert message in str(info.value)
