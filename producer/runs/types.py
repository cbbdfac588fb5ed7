"""What the run API takes and gives: the question set and sweep spec, the endpoints a run
uses, a run's result and an asked question's answer."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from qfarm.common.errors import ConfigError, InputError
from qfarm.common.models import (
    ALL_MODES,
    JobRecord,
    Manifest,
    Mode,
    Question,
    QuestionSelection,
    Row,
)
from qfarm.common.policy import Policy
from qfarm.common.questions import (
    DEFAULT_MAX_QUESTION_CHARS,
    check_question,
    digest_content,
    question_id_for,
    select_questions,
    text_problem,
)
from qfarm.common.settings import Settings
from qfarm.producer.runs.endpoints import probe_endpoints
from qfarm.producer.runs.sweep import load_questions
from qfarm.producer.store import Progress

Say = Callable[[str], None]


OnProgress = Callable[[Progress], None]


@dataclass(frozen=True)
class Endpoints:
    """The LLM endpoints a run uses, and whether they are the qfarm simulator.

    ``server`` names a server the caller started (the manifest and summary carry it, e.g.
    "llama.cpp server (llama-cpp-python 0.3.36), CPU, local"); ``settings`` are the gateway
    settings that server needs (one request in flight, its context window...), applied on
    top of the run's settings while it runs in this process.
    """

    urls: list[str]
    simulated: bool
    server: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    def apply(self, settings: Settings) -> Settings:
        """``settings`` pointed at these endpoints, with the server's own settings."""
        return settings.model_copy(update={**self.settings, "llm_endpoints": ",".join(self.urls)})


# Gives the endpoints for a run while the run needs them (a context, so a caller may
# start a server for the run's duration: the CLI starts the simulator when none is set).
EndpointsFor = Callable[[Settings], AbstractContextManager[Endpoints]]


@contextlib.contextmanager
def configured_endpoints(settings: Settings) -> Iterator[Endpoints]:
    """The endpoints of ``settings`` (QFARM_LLM_ENDPOINTS), checked to answer as OpenAI-compatible
    servers of QFARM_MODEL."""
    if not settings.endpoints:
        raise ConfigError(
            "no LLM endpoints: set QFARM_LLM_ENDPOINTS (or Settings(llm_endpoints=...)) to base "
            "URLs such as http://gpu1:8000; start a simulator with `qfarm sim --port 8000`"
        )
    probe = probe_endpoints(settings.endpoints, model=settings.model, api_keys={
        url: settings.api_key_for(url) for url in settings.endpoints})
    server = None if probe.simulated else recognised_server(
        probe.alive[0], settings.api_key_for(probe.alive[0]))
    yield Endpoints(urls=settings.endpoints, simulated=probe.simulated, server=server)


def recognised_server(url: str, api_key: str | None, timeout_s: float = 5.0) -> str | None:
    """The name of a server that says what it is in ``/openapi.json`` (llama.cpp's Python
    server does), for the manifest; None for vLLM and anything not recognised."""
    from qfarm.worker.llm.client import server_info_from_openapi

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        resp = httpx.get(f"{url}/openapi.json", headers=headers, timeout=timeout_s)
        info = server_info_from_openapi(resp.json()) if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return info.name if info else None


@dataclass(frozen=True)
class QuestionSet:
    """Questions with where they came from and the digest of their source; ``selection``:
    which of the source's questions these are, when not all (``selected``)."""

    questions: list[Question]
    source: str
    digest: str
    selection: QuestionSelection | None = None

    def selected(self, *, limit: int | None = None, sample: int | None = None,
                 seed: int | None = None) -> QuestionSet:
        """The first ``limit`` questions, or ``sample`` of them chosen by ``seed``
        (``qfarm.common.questions.select_questions``); this set when neither is given."""
        chosen, selection = select_questions(self.questions, limit=limit, sample=sample,
                                             seed=seed)
        if selection is None:
            return self
        return dataclasses.replace(self, questions=chosen, selection=selection)

    @classmethod
    def from_file(cls, path: Path, max_chars: int = DEFAULT_MAX_QUESTION_CHARS) -> QuestionSet:
        questions, digest = load_questions(path, max_chars)
        return cls(questions=questions, source=str(path), digest=digest)

    @classmethod
    def from_texts(cls, texts: Sequence[str | Question], source: str = "<python>",
                   max_chars: int = DEFAULT_MAX_QUESTION_CHARS) -> QuestionSet:
        questions = []
        for i, item in enumerate(texts):
            if isinstance(item, Question):
                where = item.source or f"{source}[{i}]"
                check_question(item.text, where, max_chars)
                problem = text_problem(item.id)
                if problem:
                    raise InputError(f"{where}: the id {problem}")
                questions.append(item)
                continue
            text = check_question(item, f"{source}[{i}]", max_chars)
            questions.append(Question(id=question_id_for(text), text=text, source=f"{source}[{i}]"))
        if not questions:
            raise InputError(f"{source}: no questions given")
        digest = digest_content("\n".join(q.model_dump_json() for q in questions))
        return cls(questions=questions, source=source, digest=digest)


@dataclass(frozen=True)
class SweepSpec:
    """What to run: every question in every mode, ``n`` samples each; with ``limit`` only
    the first ``limit`` questions, with ``sample`` that many chosen by ``seed`` (the
    manifest records which: ``Manifest.selection``)."""

    questions: Path | Sequence[str | Question] | QuestionSet
    modes: Sequence[Mode | str] = ALL_MODES
    n: int = 1
    policy: Policy = field(default_factory=Policy)
    keep_answers: bool = False
    use_cache: bool = True
    # ``--cache``: the response cache answers requests asked before (docs/llm.md).
    response_cache: bool = False
    limit: int | None = None
    sample: int | None = None
    seed: int | None = None

    def question_set(self, max_chars: int = DEFAULT_MAX_QUESTION_CHARS) -> QuestionSet:
        """The questions, each checked (``max_chars``: QFARM_MAX_QUESTION_CHARS)."""
        if isinstance(self.questions, QuestionSet):
            for q in self.questions.questions:
                check_question(q.text, q.source or self.questions.source, max_chars)
            return self.questions
        if isinstance(self.questions, Path):
            return QuestionSet.from_file(self.questions, max_chars)
        if isinstance(self.questions, str):
            raise InputError("SweepSpec.questions: a str is not a list of questions; pass a Path "
                             "for a question file or a list of question texts")
        return QuestionSet.from_texts(self.questions, max_chars=max_chars)


@dataclass(frozen=True)
class RunResult:
    """How a run ended (as far as this call followed it) and where its files are.

    ``status`` is the run's ``status.json`` status: complete, incomplete, cancelled,
    failed, running (detached on purpose), interrupted (distributed: this process stopped
    following and the run goes on; eager: the run stopped with the rows it had, and
    ``resume_eager`` runs the rest), enqueue interrupted, detached: Redis unreachable, or
    stopped: no worker (some of the run's queues had no worker for as long as the follower
    waits; the jobs stay queued).
    """

    manifest: Manifest
    run_dir: Path
    status: str
    rows_written: int = 0
    error: str | None = None
    summary: Path | None = None
    enqueued: int | None = None
    enqueue_s: float | None = None

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def rows_path(self) -> Path:
        return self.run_dir / "rows.jsonl"

    @property
    def jobs_without_row(self) -> int:
        return max(0, self.manifest.n_jobs - self.rows_written)

    def rows(self) -> list[Row]:
        """The run's rows so far, in the order they landed."""
        if not self.rows_path.exists():
            return []
        with self.rows_path.open(encoding="utf-8") as f:
            return [Row.model_validate_json(line) for line in f if line.strip()]


@dataclass(frozen=True)
class Answer:
    """One question's row, and its full record (claims, sidecar) when one was kept."""

    row: Row
    record: JobRecord | None
