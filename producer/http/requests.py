"""Request checks: each part of a question or a sweep, with the CLI's own functions, before
anything is written or sent."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool

from qfarm.common.errors import InputError, PolicyError
from qfarm.common.jobs import parse_modes
from qfarm.common.models import Question
from qfarm.common.policy import policy_from_mapping
from qfarm.common.questions import parse_questions, question_problem
from qfarm.common.settings import Settings
from qfarm.producer.api import QuestionSet, SweepSpec
from qfarm.producer.http.errors import ApiError, from_validation
from qfarm.producer.http.schemas import MAX_N, SET_NAME, SweepRequest
from qfarm.producer.rundir import UPLOADS_DIR

NDJSON = "application/x-ndjson"


def question_text(text: str, limit: int, where: str) -> str:
    """The question stripped, or a 422: the rule `qfarm sweep` and `qfarm ask` apply
    (length QFARM_MAX_QUESTION_CHARS, no lone surrogate, no control character)."""
    text = text.strip()
    problem = question_problem(text, limit)
    if problem:
        raise ApiError(422, f"{where}: {problem}", where)
    return text


def modes_of(values: list[str], where: str) -> list[Any]:
    try:
        return parse_modes(values)
    except InputError as exc:
        raise ApiError(422, f"{where}: {exc}", where) from None


def policy_of(data: dict[str, Any]) -> Any:
    try:
        return policy_from_mapping(data)
    except PolicyError as exc:
        where = str(exc).split(":", 1)[0]
        raise ApiError(422, str(exc), where) from None


def check_plan(settings: Settings, n_questions: int, n_modes: int, n: int) -> None:
    jobs = n_questions * n_modes * n
    if jobs > settings.api_max_jobs:
        raise ApiError(
            422,
            f"{n_questions} questions x {n_modes} modes x n={n} is {jobs} jobs; at most "
            f"{settings.api_max_jobs} per sweep through the API (QFARM_API_MAX_JOBS); split "
            "the sweep or use `qfarm sweep` on a farm host",
            "n",
        )


def set_name(text: str) -> str:
    """The name a posted question set is listed under (``?name=`` or the body's ``name``),
    without a .jsonl or .txt ending; 422 when it could not be a file name."""
    name = text.strip()
    for ending in (".jsonl", ".txt"):
        name = name.removesuffix(ending)
    if not re.fullmatch(SET_NAME, name):
        raise ApiError(422, f"name: {text!r}; letters, digits, '.', '_' and '-', at most 64, "
                            "e.g. name=smoke", "name")
    return name


def upload_questions(settings: Settings, questions: list[Question], name: str = "upload") -> Path:
    """Write the sweep's questions where a resume can read them again (the run's
    ``question_file``): ``uploads/<digest>/<name>.jsonl``, content-addressed, so the same
    set is one folder, and named, so lists show the set's name. Gold answers, scope and
    article are kept: the workers grade against them and the viewer shows them."""
    body = "".join(json.dumps(_question_line(q), ensure_ascii=False) + "\n"
                   for q in questions).encode()
    folder = settings.data_dir / UPLOADS_DIR / hashlib.sha256(body).hexdigest()[:24]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.jsonl"
    if not path.exists():
        # A temporary name of its own: identical sweeps posted at once write the same file,
        # and a shared temporary name would be renamed away under the next writer.
        tmp = path.with_name(f"{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            tmp.write_bytes(body)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
    return path


def _question_line(q: Question) -> dict[str, Any]:
    line: dict[str, Any] = {"id": q.id, "question": q.text}
    for key, value in (("answers", list(q.answers or ())), ("scope", q.scope),
                       ("title", q.title)):
        if value:
            line[key] = value
    return line


async def sweep_spec(request: Request, settings: Settings) -> SweepSpec:
    """A SweepSpec from a JSON body or a JSONL upload, every part checked before anything
    is written or sent."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    raw = await request.body()
    if ctype in (NDJSON, "application/jsonl", "application/json-lines"):
        q = request.query_params
        try:
            policy_data = json.loads(q.get("policy", "{}"))
        except json.JSONDecodeError as exc:
            raise ApiError(422, f"policy: not a JSON object ({exc.msg})", "policy") from None
        if not isinstance(policy_data, dict):
            raise ApiError(422, "policy: not a JSON object", "policy")
        try:
            text = raw.decode("utf-8")
            questions = parse_questions("upload", text, max_chars=settings.max_question_chars)
        except UnicodeDecodeError:
            raise ApiError(422, "questions: the upload is not UTF-8 text", "questions") from None
        except InputError as exc:
            raise ApiError(422, str(exc), "questions") from None
        try:
            n = int(q.get("n", "1"))
        except ValueError:
            raise ApiError(422, f"n: {q.get('n')!r} is not an integer", "n") from None
        body: dict[str, Any] = {"modes": q.get("modes", ",".join(m.value for m in _all_modes())).split(","),
                "n": n, "policy": policy_data,
                "keep_answers": q.get("keep_answers", "false").lower() in ("1", "true", "yes"),
                "burn": q.get("burn", "false").lower() in ("1", "true", "yes"),
                "cache": q.get("cache", "false").lower() in ("1", "true", "yes"),
                "name": set_name(q.get("name", "upload"))}
    elif ctype in ("application/json", ""):
        try:
            data = json.loads(raw or b"{}")
            req = SweepRequest.model_validate(data)
        except json.JSONDecodeError as exc:
            raise ApiError(422, f"body: not JSON ({exc.msg})") from None
        except Exception as exc:
            raise from_validation(exc) from None
        for i, text in enumerate(req.questions):
            question_text(text, settings.max_question_chars, f"questions[{i}]")
        questions = QuestionSet.from_texts(req.questions, source="request",
                                         max_chars=settings.max_question_chars).questions
        body = req.model_dump(exclude={"questions"})
    else:
        raise ApiError(415, f"Content-Type {ctype!r}: send application/json or {NDJSON}")
    for q_ in questions:
        question_text(q_.text, settings.max_question_chars, f"questions[{q_.id}]")
    if not 1 <= body["n"] <= MAX_N:
        raise ApiError(422, f"n: {body['n']}; allowed 1 <= n <= {MAX_N}", "n")
    modes = modes_of(body["modes"], "modes")
    policy = policy_of(body["policy"])
    check_plan(settings, len(questions), len(modes), body["n"])
    path = await run_in_threadpool(upload_questions, settings, questions, set_name(body["name"]))
    return SweepSpec(questions=QuestionSet.from_file(path, settings.max_question_chars), modes=modes, n=body["n"],
                     policy=policy, keep_answers=body["keep_answers"], use_cache=not body["burn"],
                     response_cache=body["cache"])


def _all_modes() -> tuple[Any, ...]:
    from qfarm.common.models import ALL_MODES

    return ALL_MODES
