"""Asking one question: eagerly in this process, or on the ``interactive`` queue, once
(``qfarm ask``) or many times over one context (the HTTP API)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from qfarm.common import keys
from qfarm.common.errors import InputError, QfarmError
from qfarm.common.jobs import ASK_RUN_PREFIX, parse_modes
from qfarm.common.models import JobRecord, Manifest, Mode, Question, Row
from qfarm.common.policy import Policy
from qfarm.common.questions import check_question, digest_content, question_id_for
from qfarm.common.settings import Settings, load_settings
from qfarm.common.vocab import Role
from qfarm.producer.rundir import new_run_id
from qfarm.producer.runs.consumers import unconsumed_queues, worker_command
from qfarm.producer.runs.services import (
    celery_app,
    eager_services,
    enqueue_counted,
    open_local_retriever,
    require_endpoints_for_workers,
    run_manifest,
)
from qfarm.producer.runs.sweep import SweepPlan
from qfarm.producer.runs.types import (
    Answer,
    Endpoints,
    EndpointsFor,
    QuestionSet,
    SweepSpec,
    configured_endpoints,
)
from qfarm.producer.store import ProducerStore, connect


def ask(
    question: str,
    mode: Mode | str = Mode.CLAIM_LATTICE_POINTER,
    *,
    eager: bool = False,
    policy: Policy | None = None,
    use_cache: bool = True,
    timeout_s: float = 120.0,
    settings: Settings | None = None,
    endpoints: EndpointsFor = configured_endpoints,
) -> Answer:
    """Answer one question in one mode (``qfarm ask``).

    Distributed, the job goes to the ``interactive`` queue so it never waits behind a
    sweep; a QfarmError says so when no worker consumes that queue or no row comes
    within ``timeout_s``.
    """
    settings = settings or load_settings()
    if not question.strip():
        raise InputError("the question is empty; e.g. qfarm ask \"Who were the members of the Beatles?\"")
    text = check_question(question, "", settings.max_question_chars)
    modes = parse_modes(str(mode))
    if len(modes) != 1:
        raise InputError("--mode takes one mode for ask; use qfarm sweep for several")
    if not timeout_s > 0 or not math.isfinite(timeout_s):
        raise InputError(f"--timeout {timeout_s:g}: seconds to wait for the row, a finite number "
                         "above 0, e.g. --timeout 120")
    q = Question(id=question_id_for(text), text=text, source="<command line>")
    if eager:
        return _ask_eager(settings, q, modes, policy or Policy(), use_cache, endpoints)
    return _ask_distributed(settings, q, modes, policy or Policy(), use_cache, timeout_s, endpoints)


def _ask_manifest(settings: Settings, question: Question, modes: list[Mode], policy: Policy,
                  eps: Endpoints, retriever: Any, *, eager: bool, use_cache: bool) -> Manifest:
    """An asked question is a run of one job that keeps its answer."""
    spec = SweepSpec(questions=[question], modes=modes, policy=policy, keep_answers=True,
                     use_cache=use_cache)
    questions = QuestionSet([question], "<command line>", digest_content(question.text))
    return run_manifest(spec, questions, modes, settings, eps, retriever, eager=eager,
                     run_id=ASK_RUN_PREFIX + new_run_id())


def _submit(store: ProducerStore, manifest: Manifest, question: Question, app: Any) -> str:
    # A question's run lives as long as its row (keys.ROW_TTL_S): a flood of asks leaves
    # nothing behind for good.
    store.put_manifest(manifest, ttl_s=keys.ROW_TTL_S)
    job = next(iter(SweepPlan(manifest=manifest, questions=[question]).jobs()))
    enqueue_counted(app, store, [job], stage=keys.INTERACTIVE)
    return job.job_id


def _ask_eager(settings: Settings, question: Question, modes: list[Mode], policy: Policy,
               use_cache: bool, endpoints: EndpointsFor) -> Answer:
    retriever = open_local_retriever(settings, progress=False)
    with endpoints(settings) as eps:
        settings = eps.apply(settings)
        svc, store = eager_services(settings, retriever)
        app = celery_app(settings, eager=True)  # the interactive task, inline
        manifest = _ask_manifest(settings, question, modes, policy, eps, retriever, eager=True,
                                 use_cache=use_cache)
        try:
            job_id = _submit(store, manifest, question, app)
        finally:
            svc.close()
    return _fetch(store, manifest.run_id, job_id)


def _ask_distributed(settings: Settings, question: Question, modes: list[Mode], policy: Policy,
                     use_cache: bool, timeout_s: float, endpoints: EndpointsFor) -> Answer:
    ctx = ask_context(settings, endpoints)
    ticket = submit_ask(ctx, question, modes[0], policy, use_cache=use_cache)
    answer = wait_for_answer(ctx.store, ticket, timeout_s)
    if answer is not None:
        return answer
    raise QfarmError(
        f"no answer within {timeout_s:.0f}s (run {ticket.run_id}); is a worker consuming the "
        f"interactive queue? start one with: {worker_command(Role.INTERACTIVE)}"
    )


@dataclass(frozen=True)
class AskContext:
    """What every distributed question needs, built once: a long-lived caller (the HTTP
    API) keeps one instead of probing the endpoints and opening the index per question."""

    settings: Settings
    store: ProducerStore
    app: Any
    retriever: Any
    endpoints: Endpoints


@dataclass(frozen=True)
class AskTicket:
    """A submitted question: its one-job run and the job's id."""

    run_id: str
    job_id: str


def ask_context(settings: Settings, endpoints: EndpointsFor = configured_endpoints) -> AskContext:
    """Check and open what distributed questions need: endpoints set and answering, Redis,
    the local index (for the manifest's index version)."""
    require_endpoints_for_workers(settings)
    store = ProducerStore(connect(settings.redis_url))
    app = celery_app(settings)
    retriever = open_local_retriever(settings, progress=False)
    with endpoints(settings) as eps:
        pass  # the workers call the endpoints; this only checks they answer
    return AskContext(settings, store, app, retriever, eps)


def submit_ask(ctx: AskContext, question: Question | str, mode: Mode | str, policy: Policy,
               *, use_cache: bool = True) -> AskTicket:
    """Send one question to the ``interactive`` queue (after checking a worker consumes it)."""
    if isinstance(question, str):
        text = check_question(question, "", ctx.settings.max_question_chars)
        question = Question(id=question_id_for(text), text=text, source="<command line>")
    else:
        check_question(question.text, question.source or "",
                       ctx.settings.max_question_chars)
    modes = parse_modes(str(mode))
    _require_interactive_worker(ctx.app, ctx.store)
    manifest = _ask_manifest(ctx.settings, question, modes, policy, ctx.endpoints, ctx.retriever,
                             eager=False, use_cache=use_cache)
    return AskTicket(manifest.run_id, _submit(ctx.store, manifest, question, ctx.app))


def poll_pauses(first_s: float = 0.02, factor: float = 1.5, most_s: float = 0.25) -> Iterator[float]:
    """Pauses between polls for a question's row: short first (most answers are quick),
    longer later, so a slow answer costs few Redis reads."""
    pause = first_s
    while True:
        yield pause
        pause = min(pause * factor, most_s)


def wait_for_answer(store: ProducerStore, ticket: AskTicket, timeout_s: float) -> Answer | None:
    """The question's answer, polling until ``timeout_s``; None if it has not come."""
    deadline = time.monotonic() + timeout_s
    for pause in poll_pauses():
        answer = answer_for(store, ticket)
        if answer is not None or time.monotonic() >= deadline:
            return answer
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
    return None


def answer_for(store: ProducerStore, ticket: AskTicket) -> Answer | None:
    """The question's answer once its row exists, else None (one round trip per poll)."""
    pipe = store.client.pipeline(transaction=False)
    pipe.hget(keys.rows_key(ticket.run_id), ticket.job_id)
    pipe.get(keys.detail_key(ticket.run_id, ticket.job_id))
    raw, detail = pipe.execute()
    if raw is None:
        return None
    row = Row.model_validate_json(raw)
    if detail is None and not row.cache_hit and not row.error:
        # The worker stores the full record just after the row: give it a moment.
        time.sleep(0.02)
        detail = store.client.get(keys.detail_key(ticket.run_id, ticket.job_id))
    record = JobRecord.model_validate_json(detail) if detail else None
    return Answer(row=row, record=record)


_interactive_seen_at = 0.0  # monotonic time a heartbeat last showed an interactive worker


HEARTBEAT_TRUST_S = 2.0  # one flush interval: a worker seen this recently is taken as alive


def _require_interactive_worker(app: Any, store: ProducerStore | None = None) -> None:
    # A worker seen this recently is taken as alive without asking again: a flood of
    # questions costs no Redis round trip (nor a Celery inspect) each.
    global _interactive_seen_at
    if store is not None and time.monotonic() - _interactive_seen_at < HEARTBEAT_TRUST_S:
        return
    if unconsumed_queues(app, store, [keys.INTERACTIVE.queue], inspect_timeout_s=1.5):
        raise QfarmError(
            "no worker is consuming the interactive queue; start one with: "
            f"{worker_command(Role.INTERACTIVE)}  (or use --eager)"
        )
    if store is not None:
        _interactive_seen_at = time.monotonic()


def _fetch(store: ProducerStore, run_id: str, job_id: str) -> Answer:
    raw = store.client.hget(keys.rows_key(run_id), job_id)
    if raw is None:
        raise QfarmError(f"run {run_id}: the job produced no row; see the worker log")
    detail = store.client.get(keys.detail_key(run_id, job_id))
    record = JobRecord.model_validate_json(detail) if detail else None
    return Answer(row=Row.model_validate_json(raw), record=record)
