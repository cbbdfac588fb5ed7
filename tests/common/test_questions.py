"""Question files: JSONL lines are JSON (any Unicode inside a string), ids are strings or numbers;
``--limit``/``--sample`` choose questions the same way every time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qfarm.common.errors import InputError
from qfarm.common.models import Question, QuestionSelection
from qfarm.common.questions import parse_questions, reselect_questions, select_questions
from qfarm.producer.runs.sweep import load_questions


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u0085"])
def test_a_raw_line_separator_inside_a_json_string_stays_in_its_question(char: str) -> None:
    question = f"What is{char}jazz?"
    line = json.dumps({"id": "q1", "question": question}, ensure_ascii=False)
    assert char in line  # written raw, as a JSON encoder may
    content = line + "\n" + json.dumps({"id": "q2", "question": "Who was Bach?"}) + "\n"
    parsed = parse_questions("q.jsonl", content)
    assert [q.id for q in parsed] == ["q1", "q2"]
    assert parsed[0].text == question
    assert parsed[1].source == "q.jsonl:2"


def test_windows_line_endings_still_number_lines() -> None:
    content = '{"id": "a", "question": "What is jazz?"}\r\n\r\n{"id": "b", "question": "Who?"}\r\n'
    assert [q.source for q in parse_questions("q.jsonl", content)] == ["q.jsonl:1", "q.jsonl:3"]


def test_a_carriage_return_alone_ends_a_line() -> None:
    parsed = parse_questions("q.txt", "Who painted the Mona Lisa?\rWhat is DNA?\r")
    assert [(q.text, q.source) for q in parsed] == [
        ("Who painted the Mona Lisa?", "q.txt:1"), ("What is DNA?", "q.txt:2")]


@pytest.mark.parametrize("header", ["question", "Question", "id,question", "question\tanswer",
                                    '"question","answers"', "id;question;gold"])
def test_a_table_header_is_not_a_question(header: str) -> None:
    with pytest.raises(InputError, match=r"q.txt:1: .* looks like a table's header"):
        parse_questions("q.txt", f"{header}\nWhat is jazz?\n")


def test_a_question_that_only_mentions_a_column_word_is_kept() -> None:
    assert len(parse_questions("q.txt", "What is a question?\nQuestion time, who hosts it?\n")) == 2


@pytest.mark.parametrize(
    ("raw", "expected"),
    [('"q7"', "q7"), ("7", "7"), ("1.5", "1.5"), ("2.0", "2"), ("-3", "-3"), ("1e2", "100")],
)
def test_an_id_is_a_string_or_a_finite_number(raw: str, expected: str) -> None:
    (q,) = parse_questions("q.jsonl", f'{{"id": {raw}, "question": "What is jazz?"}}\n')
    assert q.id == expected


@pytest.mark.parametrize(
    ("raw", "got"),
    [("true", "got true"), ("false", "got false"), ("[1]", "got [1]"), ('{"a": 1}', 'got {"a": 1}'),
     ("NaN", "got nan"), ("Infinity", "got inf"), ("1e999", "got inf"), ('""', "empty string")],
)
def test_any_other_id_is_refused_with_file_line_and_what_is_allowed(raw: str, got: str) -> None:
    content = f'{{"id": "ok", "question": "Who?"}}\n{{"id": {raw}, "question": "What is jazz?"}}\n'
    with pytest.raises(InputError) as info:
        parse_questions("q.jsonl", content)
    message = str(info.value)
    assert message.startswith("q.jsonl:2: ") and got in message, message
    assert "non-empty string or a finite number" in message


def test_two_ids_that_are_the_same_number_collide() -> None:
    content = '{"id": 2, "question": "What is jazz?"}\n{"id": 2.0, "question": "Who?"}\n'
    with pytest.raises(InputError, match=r"q.jsonl:2: duplicate question id '2' \(first at q.jsonl:1\)"):
        parse_questions("q.jsonl", content)


@pytest.mark.parametrize(
    ("name", "body"),
    [("q.jsonl", '{"id": "a", "question": "What is jazz?"}\n'),
     ("q.txt", '{"id": "a", "question": "What is jazz?"}\n'),  # JSONL sniffed from the first line
     ("q.txt", "What is jazz?\n")],
)
def test_a_utf8_bom_is_not_part_of_the_file(tmp_path: Path, name: str, body: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    questions, digest = load_questions(path)
    assert [q.text for q in questions] == ["What is jazz?"]
    assert "\ufeff" not in questions[0].id
    assert digest.startswith("sha256:")


def test_a_title_names_the_answering_article_and_must_be_a_string() -> None:
    ok = parse_questions("f.jsonl", json.dumps({"question": "Q?", "title": " Paris "}) + "\n")
    assert ok[0].title == "Paris"
    with pytest.raises(InputError, match=r'f.jsonl:1: "title" must be a non-empty string'):
        parse_questions("f.jsonl", json.dumps({"question": "Q?", "title": 3}) + "\n")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"id": "a", "question": "What is \\ud800 jazz?"}', "f.jsonl:1: the question holds a lone surrogate (U+D800) at character 9"),
        ('{"id": "a", "question": "What is \\udc00?"}', "lone surrogate (U+DC00)"),
        ('{"id": "\\ud800", "question": "What is jazz?"}', 'f.jsonl:1: "id" holds a lone surrogate'),
        ('{"id": "a", "question": "Q?", "answers": "\\ud800"}', "f.jsonl:1: answer 1 holds a lone surrogate"),
        ('{"id": "a", "question": "Q?", "title": "T\\udfff"}', 'f.jsonl:1: "title" holds a lone surrogate'),
        ('{"id": "a", "question": "What\\u0000 is jazz?"}', "f.jsonl:1: the question holds a control character (U+0000) at character 5"),
        ('{"id": "a\\u0007", "question": "Q?"}', '"id" holds a control character (U+0007)'),
        ('{"id": ' + "1" * 5000 + ', "question": "Q?"}', "f.jsonl:1: a JSON number too long to read"),
        ('{"id": "a", "question": "Q?", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "f.jsonl:1: JSON nested too deeply"),
        ("[" * 100_000, "f.jsonl:1: "),  # unbalanced: too deep or malformed, one line either way
        ('{"id": "' + "x" * 201 + '", "question": "Q?"}', '"id" is 201 characters; at most 200'),
        ('{"id": "a", "question": "' + "x" * 2001 + '"}', "the question is 2,001 characters; at most 2,000"),
    ],
)
def test_a_question_no_row_could_carry_is_refused_at_load_with_file_line(content: str, message: str) -> None:
    """A lone surrogate cannot be written as UTF-8: its jobs would never get a row (the run
    stalled, or ended "incomplete" with exit 0). Refused here, before anything is sent."""
    with pytest.raises(InputError) as info:
        parse_questions("f.jsonl", content + "\n")
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_a_surrogate_pair_is_one_character_and_welcome() -> None:
    (q,) = parse_questions("f.jsonl", '{"id": "\\ud83c\\udfb7", "question": "Who plays the \\ud83c\\udfb7?"}\n')
    assert q.id == "\U0001f3b7" and q.text == "Who plays the \U0001f3b7?"


def test_tabs_and_line_separators_are_whitespace_not_control_characters() -> None:
    (q,) = parse_questions("f.jsonl", json.dumps({"id": "a", "question": "What\tis\njazz?\r"}) + "\n")
    assert q.text == "What\tis\njazz?"


@pytest.mark.parametrize("limit", [12, 13])
def test_the_question_limit_is_the_callers(limit: int) -> None:
    content = "What is jazz?\n"  # 13 characters
    if limit < 13:
        with pytest.raises(InputError, match="f.txt:1: the question is 13 characters; at most 12"):
            parse_questions("f.txt", content, max_chars=limit)
    else:
        assert parse_questions("f.txt", content, max_chars=limit)[0].text == "What is jazz?"


def test_a_text_file_question_with_nul_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "q.txt"
    path.write_bytes(b"Who was Bach?\nWhat is\x00 jazz?\n")
    with pytest.raises(InputError, match=r"q.txt:2: the question holds a control character \(U\+0000\)"):
        load_questions(path)


# --------------------------------------------------------------------------- --limit, --sample


def _numbered(k: int) -> list[Question]:
    return [Question(id=f"q{i:03d}", text=f"What is river number {i}?") for i in range(k)]


def test_limit_takes_the_first_questions_and_says_so() -> None:
    chosen, selection = select_questions(_numbered(20), limit=5)
    assert [q.id for q in chosen] == ["q000", "q001", "q002", "q003", "q004"]
    assert selection == QuestionSelection(limit=5, of=20)
    assert select_questions(_numbered(20)) == (_numbered(20), None)  # no flag: all, unrecorded


def test_a_sample_is_fixed_by_its_seed_kept_in_file_order_and_blind_to_it() -> None:
    questions = _numbered(50)
    chosen, selection = select_questions(questions, sample=10, seed=3)
    assert selection == QuestionSelection(sample=10, seed=3, of=50)
    ids = [q.id for q in chosen]
    assert len(ids) == 10 and ids == sorted(ids)  # file order
    assert [q.id for q in select_questions(questions, sample=10, seed=3)[0]] == ids
    shuffled = list(reversed(questions))  # where a question stands does not decide its draw
    assert sorted(q.id for q in select_questions(shuffled, sample=10, seed=3)[0]) == ids
    others = {tuple(q.id for q in select_questions(questions, sample=10, seed=s)[0])
              for s in range(5)}
    assert len(others) == 5  # another seed, another sample
    assert select_questions(questions, sample=10)[1] == QuestionSelection(sample=10, seed=0, of=50)
    # The recorded selection chooses the same questions again (``--resume``).
    assert reselect_questions(questions, selection) == chosen
    assert reselect_questions(questions, None) == questions


def test_asking_for_more_questions_than_the_file_has_takes_them_all() -> None:
    assert select_questions(_numbered(3), limit=10)[0] == _numbered(3)
    assert select_questions(_numbered(3), sample=10, seed=1)[0] == _numbered(3)


@pytest.mark.parametrize(("flags", "needle"), [
    ({"limit": 0}, "--limit 0"),
    ({"sample": -1}, "--sample -1"),
    ({"limit": 2, "sample": 2}, "give one of them"),
    ({"seed": 4}, "--seed 4 chooses which questions --sample takes"),
])
def test_a_bad_selection_is_one_clear_input_error(flags: dict, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        select_questions(_numbered(3), **flags)
