"""Question files: plain text (one per line) or JSONL ``{"id", "question", "answers"?, "scope"?, "title"?}``.

Parsing works on text already read, so it stays pure; errors name file:line.

A question is refused at load time, before anything is enqueued, when a row could not
carry it: a lone surrogate (JSON's ``"\ud800"`` with no pair) cannot be written as
UTF-8, so its jobs would never get a row; a control character such as NUL breaks the
pages and files it reaches; a question longer than ``QFARM_MAX_QUESTION_CHARS`` (the
limit the HTTP API applies too) is a mistake, not a question. Ids and answers follow
the same rules (an id is at most ``MAX_ID_CHARS``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re

from qfarm.common.errors import InputError
from qfarm.common.models import Question, QuestionSelection


def question_id_for(text: str) -> str:
    """Stable id for a question given without one: a digest of its normalized text."""
    norm = " ".join(text.casefold().split())
    return "q" + hashlib.sha256(norm.encode()).hexdigest()[:10]


DEFAULT_MAX_QUESTION_CHARS = 2_000  # Settings.max_question_chars (QFARM_MAX_QUESTION_CHARS)
MAX_ID_CHARS = 200  # ids end up in job ids, Redis keys and every row
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # a pair decodes to one astral character
# C0 controls and DEL; tab, newline and carriage return are whitespace a question may hold.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored and shown as given (a lone surrogate, a control
    character), naming the character and its position, or None."""
    for pattern, what, fix in (
        (_LONE_SURROGATE, "a lone surrogate", "it cannot be written as UTF-8; fix the \\u escape"),
        (_CONTROL, "a control character", "remove it"),
    ):
        found = pattern.search(text)
        if found:
            return f"holds {what} (U+{ord(found.group()):04X}) at character {found.start() + 1}; {fix}"
    return None


def question_problem(text: str, max_chars: int = DEFAULT_MAX_QUESTION_CHARS) -> str | None:
    """Why ``text`` (stripped) is not a question the farm takes, or None. One rule for
    question files, ``qfarm ask``, the Python API and the HTTP API."""
    if not text:
        return "the question is empty"
    if len(text) > max_chars:
        return (f"the question is {len(text):,} characters; at most {max_chars:,} "
                "(QFARM_MAX_QUESTION_CHARS)")
    problem = text_problem(text)
    return f"the question {problem}" if problem else None


def check_question(text: str, where: str, max_chars: int = DEFAULT_MAX_QUESTION_CHARS) -> str:
    """``text`` stripped, or an InputError ``where: why`` (just ``why`` without a where)."""
    text = text.strip()
    problem = question_problem(text, max_chars)
    if problem:
        raise InputError(f"{where}: {problem}" if where else problem)
    return text


def _is_jsonl(name: str, lines: list[str]) -> bool:
    if name.endswith((".jsonl", ".json")):
        return True
    first = next((ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")), "")
    return first.startswith("{")


ID_FORM = '"id" must be a non-empty string or a finite number (e.g. "q7", 7 or 1.5)'


def _question_id(where: str, value: object) -> str | None:
    """A JSONL ``id`` as text: a string as given, a number in its shortest form (1.5 is
    "1.5"; 2.0 is "2", the same JSON number as 2)."""
    if value is None:
        return None
    # bool is an int to Python; `"id": true` is a mistake, not the id "True".
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InputError(f"{where}: {ID_FORM}, got {json.dumps(value)}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"{where}: {ID_FORM}, got {value}")
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str) and not value.strip():
        raise InputError(f"{where}: {ID_FORM}, got an empty string")
    text = str(value)
    problem = text_problem(text)
    if problem:
        raise InputError(f'{where}: "id" {problem}')
    if len(text) > MAX_ID_CHARS:
        raise InputError(f'{where}: "id" is {len(text):,} characters; at most {MAX_ID_CHARS}')
    return text


def _load_json(where: str, line: str) -> object:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{where}: malformed JSON ({exc.msg} at column {exc.colno}); each line must be "
            '{"id": ..., "question": ..., "answers": [...]}'
        ) from exc
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply to read; each line must be "
                         '{"id": ..., "question": ..., "answers": [...]}') from None
    except ValueError as exc:  # an integer of over 4,300 digits (sys.get_int_max_str_digits)
        raise InputError(f"{where}: a JSON number too long to read ({str(exc).split(';')[0]}); "
                         'write a long id as a string, e.g. "id": "q7"') from None


def _answers(where: str, answers: object) -> tuple[str, ...] | None:
    if answers is None:
        return None
    if isinstance(answers, str):
        answers = [answers]
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise InputError(f'{where}: "answers" must be a list of strings')
    for i, answer in enumerate(answers, start=1):
        problem = text_problem(answer)
        if problem:
            raise InputError(f"{where}: answer {i} {problem}")
    return tuple(answers) or None


def _parse_json_line(name: str, lineno: int, line: str, max_chars: int) -> Question:
    where = f"{name}:{lineno}"
    obj = _load_json(where, line)
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    text = obj.get("question")
    if not isinstance(text, str) or not text.strip():
        raise InputError(f'{where}: missing "question" (a non-empty string)')
    text = check_question(text, where, max_chars)
    qid = _question_id(where, obj.get("id"))
    answers = _answers(where, obj.get("answers"))
    scope = obj.get("scope")
    if scope not in (None, "bounded", "unbounded"):
        raise InputError(f'{where}: "scope" must be "bounded" or "unbounded", got {scope!r}')
    title = obj.get("title")
    if title is not None and (not isinstance(title, str) or not title.strip()):
        raise InputError(f'{where}: "title" must be a non-empty string (the answering article)')
    problem = text_problem(title) if title else None
    if problem:
        raise InputError(f'{where}: "title" {problem}')
    return Question(
        id=qid if qid is not None else question_id_for(text),
        text=text,
        answers=answers,
        source=where,
        scope=scope,
        title=title.strip() if title else None,
    )


# The first line of a CSV/TSV export: column names, not a question.
_HEADER = re.compile(
    r"(?i)\s*\W?(id|qid|question|questions|query|text|prompt)\W?"
    r"(\s*[,;\t|]\s*\W?(id|qid|question|query|text|prompt|answer|answers|gold|title|source)\W?)*\s*"
)


def parse_questions(
    name: str, content: str, *, max_chars: int = DEFAULT_MAX_QUESTION_CHARS
) -> list[Question]:
    """Parse a question file's content; raises InputError naming file:line. ``max_chars``
    is the longest question (QFARM_MAX_QUESTION_CHARS)."""
    # Lines end at "\n" only: str.splitlines() would also split at U+2028, U+0085 and
    # other characters that are valid, unescaped, inside a JSON string. A UTF-8 BOM
    # (editors on Windows write one) is not part of the first line.
    # A carriage return alone ends a line too (old Mac files): JSON cannot hold one
    # unescaped, so splitting there never cuts a JSONL line in two.
    lines = content.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    questions: list[Question] = []
    jsonl = _is_jsonl(name, lines)
    header_checked = False
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not jsonl and not header_checked:
            header_checked = True
            if _HEADER.fullmatch(line):
                raise InputError(
                    f"{name}:{lineno}: {line!r} looks like a table's header, not a question: "
                    "a question file holds one question per line (or JSONL); delete that line "
                    "or make it a # comment"
                )
        if jsonl:
            questions.append(_parse_json_line(name, lineno, line, max_chars))
        else:
            text = check_question(line, f"{name}:{lineno}", max_chars)
            questions.append(
                Question(id=question_id_for(text), text=text, source=f"{name}:{lineno}")
            )
    if not questions:
        raise InputError(
            f"{name}: no questions found; write one question per line (# comments allowed) "
            'or JSONL lines {"id": ..., "question": ...}'
        )
    seen: dict[str, str] = {}
    for q in questions:
        if q.id in seen:
            raise InputError(f"{q.source}: duplicate question id {q.id!r} (first at {seen[q.id]})")
        seen[q.id] = q.source or ""
    return questions


def digest_content(content: str | bytes) -> str:
    data = content.encode() if isinstance(content, str) else content
    return "sha256:" + hashlib.sha256(data).hexdigest()


def select_questions(questions: list[Question], *, limit: int | None = None,
                     sample: int | None = None, seed: int | None = None,
                     ) -> tuple[list[Question], QuestionSelection | None]:
    """The questions a run takes, before expansion into jobs: the first ``limit``, or
    ``sample`` of them chosen by ``seed`` (0 when not given), kept in file order.

    The sample is the ``sample`` questions with the smallest SHA-256 of ``"<seed>:<id>"``:
    the same for the same seed and question ids on any machine and Python, and a question's
    place in the file does not change whether it is drawn. Asking for as many questions as
    the file has, or more, takes them all. Returns the selection to record in the manifest
    (None: no flag given).
    """
    if limit is not None and sample is not None:
        raise InputError("--limit and --sample both choose the questions: give one of them")
    if seed is not None and sample is None:
        raise InputError(f"--seed {seed} chooses which questions --sample takes: give --sample N "
                         "too, e.g. --sample 50 --seed 1")
    for flag, value in (("--limit", limit), ("--sample", sample)):
        if value is not None and value < 1:
            raise InputError(f"{flag} {value}: the number of questions to run is at least 1, "
                             f"e.g. {flag} 20")
    if limit is None and sample is None:
        return questions, None
    if limit is not None:
        chosen = questions[:limit]
    else:
        assert sample is not None
        seed = 0 if seed is None else seed
        key = {q.id: hashlib.sha256(f"{seed}:{q.id}".encode()).hexdigest() for q in questions}
        drawn = set(sorted(key, key=lambda qid: (key[qid], qid))[:sample])
        chosen = [q for q in questions if q.id in drawn]
    return chosen, QuestionSelection(limit=limit, sample=sample, seed=seed, of=len(questions))


def reselect_questions(questions: list[Question],
                       selection: QuestionSelection | None) -> list[Question]:
    """The questions a run recorded in its manifest took, chosen again from its file."""
    if selection is None:
        return questions
    chosen, _ = select_questions(questions, limit=selection.limit, sample=selection.sample,
                                 seed=selection.seed)
    return chosen
