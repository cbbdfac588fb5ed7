"""Question files: plain text (one per line) or JSONL ``{"id", "question", "answers"?, "scope"?, "title"?}``.

Parsing works on text already read, so it stays pure; errors name file:line.
"""

from __future__ import annotations

import hashlib
import json
import math

from common.errors import InputError
from common.models import Question


def question_id_for(text: str) -> str:
    """Stable id for a question given without one: a digest of its normalized text."""
    norm = " ".join(text.casefold().split())
    return "q" + hashlib.sha256(norm.encode()).hexdigest()[:10]


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
    return str(value)


def _parse_json_line(name: str, lineno: int, line: str) -> Question:
    where = f"{name}:{lineno}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{where}: malformed JSON ({exc.msg} at column {exc.colno}); each line must be "
            '{"id": ..., "question": ..., "answers": [...]}'
        ) from exc
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    text = obj.get("question")
    if not isinstance(text, str) or not text.strip():
        raise InputError(f'{where}: missing "question" (a non-empty string)')
    qid = _question_id(where, obj.get("id"))
    answers = obj.get("answers")
    if answers is not None:
        if isinstance(answers, str):
            answers = [answers]
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise InputError(f'{where}: "answers" must be a list of strings')
    scope = obj.get("scope")
    if scope not in (None, "bounded", "unbounded"):
        raise InputError(f'{where}: "scope" must be "bounded" or "unbounded", got {scope!r}')
    title = obj.get("title")
    if title is not None and (not isinstance(title, str) or not title.strip()):
        raise InputError(f'{where}: "title" must be a non-empty string (the answering article)')
    return Question(
        id=qid if qid is not None else question_id_for(text),
        text=text.strip(),
        answers=tuple(answers) if answers else None,
        source=where,
        scope=scope,
        title=title.strip() if title else None,
    )


def parse_questions(name: str, content: str) -> list[Question]:
    """Parse a question file's content; raises InputError naming file:line."""
    # Lines end at "\n" only: str.splitlines() would also split at U+2028, U+0085 and
    # other characters that are valid, unescaped, inside a JSON string. A UTF-8 BOM
    # (editors on Windows write one) is not part of the first line.
    lines = content.removeprefix("\ufeff").split("\n")
    questions: list[Question] = []
    jsonl = _is_jsonl(name, lines)
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if jsonl:
            questions.append(_parse_json_line(name, lineno, line))
        else:
            questions.append(
                Question(id=question_id_for(line), text=line, source=f"{name}:{lineno}")
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
