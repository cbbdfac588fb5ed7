"""What the eager, distributed and asking paths share: the run's manifest, the local
retriever, in-process services for eager runs and counted enqueueing."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from qfarm.common import keys
from qfarm.common.errors import ConfigError, InputError
from qfarm.common.grounding.names import TitleSet
from qfarm.common.grounding.preflight import plan_preflight_hash
from qfarm.common.models import Job, Manifest, Mode
from qfarm.common.profiles import profile_id_for_model
from qfarm.common.settings import Settings
from qfarm.common.traces import default_ratio
from qfarm.common.vocab import Backend
from qfarm.producer.rundir import new_run_id
from qfarm.producer.runs.sweep import enqueue_jobs, make_manifest
from qfarm.producer.runs.types import Endpoints, QuestionSet, SweepSpec
from qfarm.producer.store import ProducerStore

log = logging.getLogger("qfarm.producer")


def say_to_log(line: str) -> None:
    log.info("%s", line)


def run_manifest(spec: SweepSpec, questions: QuestionSet, modes: list[Mode], settings: Settings,
              eps: Endpoints, retriever: Any, *, eager: bool, run_id: str | None = None,
              corpus: str | None = None, live_traces: bool = False) -> Manifest:
    """A new run's manifest. ``live_traces`` (a distributed sweep): with ``QFARM_OTEL`` on,
    the manifest carries the share of jobs the workers trace (``Manifest.traces``)."""
    return make_manifest(
        run_id=run_id or new_run_id(),
        question_file=questions.source,
        question_file_digest=questions.digest,
        n_questions=len(questions.questions),
        modes=modes,
        n=spec.n,
        policy=spec.policy,
        model=settings.model,
        endpoints=eps.urls,
        simulated=eps.simulated,
        llm_server=eps.server,
        retriever=retriever.backend,
        index_version=retriever.index_version(),
        corpus=corpus,
        eager=eager,
        keep_answers=spec.keep_answers,
        use_cache=spec.use_cache,
        response_cache=spec.response_cache,
        selection=questions.selection,
        cost_rates=settings.cost_rates(),
        preflight_hash=plan_preflight_hash(
            (q.text for q in questions.questions), profile_id_for_model(settings.model),
            index_titles(retriever),
        ),
        traces=live_trace_ratio(settings, len(questions.questions) * len(modes) * spec.n)
        if live_traces else None,
    )


def live_trace_ratio(settings: Settings, n_jobs: int) -> float | None:
    """The share of a distributed run's jobs traced live: None unless ``QFARM_OTEL`` is on,
    else ``QFARM_OTEL_SAMPLE_RATIO``, else about ``DEFAULT_MAX_TRACES`` jobs of the run."""
    if not settings.otel:
        return None
    return settings.otel_sample_ratio if settings.otel_sample_ratio is not None \
        else default_ratio(n_jobs)


def check_same_preflight(manifest: Manifest, questions: Iterable[str], retriever: Any,
                         action: str) -> None:
    """Refuse to add rows to a run whose questions this qfarm reads differently from the
    one that planned it (a changed classifier, cap table or index titles): the run's rows
    would mix two readings under one plan. A manifest without the hash is not checked."""
    if manifest.preflight_hash is None:
        return
    now = plan_preflight_hash(questions, profile_id_for_model(manifest.model),
                              index_titles(retriever))
    if now != manifest.preflight_hash:
        raise InputError(
            f"run {manifest.run_id}: its questions were planned with preflight "
            f"{manifest.preflight_hash}, and this qfarm and index read them as {now} (a "
            f"changed quantifier classifier, profile cap table or index titles); {action} "
            f"with the qfarm and index that planned the run, or start a new run "
            f"(qfarm sweep {manifest.question_file} ...)")


def index_titles(retriever: Any) -> TitleSet | None:
    """The index's titles, as the workers' preflight reads them (the embedded index has them)."""
    title_set = getattr(retriever, "title_set", None)
    found = title_set() if callable(title_set) else None
    return found if isinstance(found, TitleSet) else None


def corpus_label(retriever: Any) -> str:
    describe: dict[str, Any] = getattr(retriever, "describe", lambda: {})()
    return str(describe.get("corpus") or describe.get("index") or "default")


def open_local_retriever(settings: Settings, *, progress: bool = True) -> Any:
    """The retriever this process will use; builds the embedded default index if needed.

    An embedded index with a damaged page is refused here, before any job runs.
    """
    from qfarm.worker.retrieval import ensure_default_index, open_retriever
    from qfarm.worker.retrieval.embedded import EmbeddedRetriever, check_index_pages

    if settings.retriever == Backend.EMBEDDED and settings.index_path is None:
        ensure_default_index(settings, progress=progress)
    retriever = open_retriever(settings)
    if isinstance(retriever, EmbeddedRetriever):
        check_index_pages(retriever.path, retriever.describe().get("corpus"))
    return retriever


def eager_services(settings: Settings, retriever: Any) -> tuple[Any, ProducerStore]:
    """In-process services for eager runs over an in-memory Redis, their gateway without
    an interactive reserve (docs/llm.md, 'Interactive requests first')."""
    import fakeredis  # only eager runs need it

    from qfarm.worker.llm import process_response_cache
    from qfarm.worker.services import Services, install_services
    from qfarm.worker.store import InProcessStore

    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    # The gateway of an in-process run serves that run alone: no single question from
    # elsewhere can reach it, so the slots kept back for one would only idle.
    settings = settings.model_copy(update={"llm_interactive_reserve": 0})
    # Only this process reaches the in-memory Redis: rows are written without the row script.
    # The response cache outlives the run: eager runs of one process share its replies.
    svc = Services(settings=settings, store=InProcessStore(client), worker_name="eager",
                   retriever_factory=lambda: retriever, response_store=process_response_cache())
    install_services(svc)
    return svc, ProducerStore(client)


def celery_app(settings: Settings, *, eager: bool = False) -> Any:
    """The workers' Celery app, configured for ``settings`` (``eager``: each message runs
    its tasks inline, in this process). Imported only by the runs that send messages, so
    the producer's modules, and an eager run through the in-process runner, load no Celery."""
    from qfarm.worker.celery import configure_app

    return configure_app(settings, eager=eager)


def require_endpoints_for_workers(settings: Settings) -> None:
    if not settings.endpoints:
        raise ConfigError(
            "QFARM_LLM_ENDPOINTS is not set: distributed runs need the workers' LLM endpoints "
            "(e.g. QFARM_LLM_ENDPOINTS=http://gpu1:8000; start a simulator with `qfarm sim --port 8000`), "
            "or run with --eager"
        )


def enqueue_counted(app: Any, store: ProducerStore, jobs: Iterable[Job], *,
                    stage: keys.Stage = keys.RETRIEVE, bundle_size: int = 1) -> int:
    """``enqueue_jobs``, adding the jobs sent per mode to the operator counters (/metrics)."""
    per_mode: Counter[str] = Counter()

    def counted() -> Iterator[Job]:
        for job in jobs:
            per_mode[job.mode.value] += 1
            yield job

    try:
        return enqueue_jobs(app, counted(), stage=stage, bundle_size=bundle_size)
    finally:
        store.count_enqueued(per_mode)
