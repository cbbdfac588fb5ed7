"""`qfarm ask`: one question, one mode, answered with the audit line (or the row as JSON).

Without ``--eager`` the job goes to the ``interactive`` queue, so it never waits
behind a sweep; the command waits for the row and fails clearly when no worker
consumes that queue.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from common import keys
from common.errors import InputError, QfarmError
from common.jobs import parse_modes
from common.models import JobRecord, Question, Row
from common.questions import digest_content, question_id_for
from common.settings import Settings, load_settings
from qfarm import runtime


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ask", help="answer one question and print its audit line")
    p.add_argument("question")
    p.add_argument("--mode", default="claim_lattice_pointer")
    p.add_argument("--eager", action="store_true", help="run in this process (no Redis, no workers)")
    p.add_argument("--json", action="store_true", help="print the row (and sidecar dict) as JSON")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the row")
    p.add_argument("--burn", action="store_true", help="bypass the result cache")
    runtime.add_policy_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    text = args.question.strip()
    if not text:
        raise InputError("the question is empty; e.g. qfarm ask \"Who were the members of the Beatles?\"")
    modes = parse_modes(args.mode)
    if len(modes) != 1:
        raise InputError("--mode takes one mode for ask; use qfarm sweep for several")
    policy = runtime.policy_from_args(args)
    settings = load_settings()
    question = Question(id=question_id_for(text), text=text, source="<command line>")
    if args.eager:
        row, record = _ask_eager(args, settings, question, modes, policy)
    else:
        row, record = _ask_distributed(args, settings, question, modes, policy)
    _print(row, record, as_json=args.json)
    return 0 if not row.error else 1


def _manifest(settings: Settings, question: Question, modes, policy, *, run_id, eps, retriever, eager, burn):
    from producer.sweep import make_manifest

    return make_manifest(
        run_id=run_id,
        question_file="<command line>",
        question_file_digest=digest_content(question.text),
        n_questions=1,
        modes=modes,
        n=1,
        policy=policy,
        model=settings.model,
        endpoints=eps.urls,
        simulated=eps.simulated,
        retriever=retriever.backend,
        index_version=retriever.index_version(),
        corpus=None,
        eager=eager,
        keep_answers=True,
        use_cache=not burn,
    )


def _submit(store, manifest, question: Question, app) -> str:
    from producer.sweep import SweepPlan, enqueue_jobs

    store.put_manifest(manifest)
    job = next(iter(SweepPlan(manifest=manifest, questions=[question]).jobs()))
    enqueue_jobs(app, [job], stage=keys.INTERACTIVE)
    return job.job_id


def _ask_eager(args, settings: Settings, question, modes, policy) -> tuple[Row, JobRecord | None]:
    from producer.runs import new_run_id
    from worker.celery_app import app

    retriever = runtime.open_local_retriever(settings, progress=False)
    with runtime.llm_endpoints(settings, quiet=args.json) as eps:
        settings = settings.model_copy(update={"llm_endpoints": ",".join(eps.urls)})
        svc, store = runtime.eager_services(settings, retriever)
        manifest = _manifest(settings, question, modes, policy, run_id="ask-" + new_run_id(),
                             eps=eps, retriever=retriever, eager=True, burn=args.burn)
        try:
            job_id = _submit(store, manifest, question, app)
        finally:
            svc.close()
    return _fetch(store, manifest.run_id, job_id)


def _ask_distributed(args, settings: Settings, question, modes, policy) -> tuple[Row, JobRecord | None]:
    from producer.runs import new_run_id
    from producer.store import ProducerStore, connect
    from worker.celery_app import configure_app

    runtime.require_endpoints_for_workers(settings)
    store = ProducerStore(connect(settings.redis_url))
    app = configure_app(settings)
    _require_interactive_worker(app)
    retriever = runtime.open_local_retriever(settings, progress=False)
    with runtime.llm_endpoints(settings, quiet=True) as eps:
        pass
    manifest = _manifest(settings, question, modes, policy, run_id="ask-" + new_run_id(),
                         eps=eps, retriever=retriever, eager=False, burn=args.burn)
    job_id = _submit(store, manifest, question, app)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if store.existing_job_ids(manifest.run_id, [job_id]):
            return _fetch(store, manifest.run_id, job_id)
        time.sleep(0.1)
    raise QfarmError(
        f"no answer within {args.timeout:.0f}s (run {manifest.run_id}); is a worker consuming the "
        "interactive queue? start one with: celery -A worker worker -Q interactive -P threads -c 8"
    )


def _require_interactive_worker(app) -> None:
    replies = app.control.inspect(timeout=1.5).active_queues() or {}
    if not any(q.get("name") == keys.INTERACTIVE.queue for qs in replies.values() for q in qs):
        raise QfarmError(
            "no worker is consuming the interactive queue; start one with: "
            "celery -A worker worker -Q interactive -P threads -c 8  (or use --eager)"
        )


def _fetch(store, run_id: str, job_id: str) -> tuple[Row, JobRecord | None]:
    raw = store.client.hget(keys.rows_key(run_id), job_id)
    if raw is None:
        raise QfarmError(f"run {run_id}: the job produced no row; see the worker log")
    detail = store.client.get(keys.detail_key(run_id, job_id))
    record = JobRecord.model_validate_json(detail) if detail else None
    return Row.model_validate_json(raw), record


def _print(row: Row, record: JobRecord | None, *, as_json: bool) -> None:
    if as_json:
        data = row.model_dump(mode="json")
        data["answerability_detail"] = record.answerability if record else None
        data["claims"] = (
            [c.model_dump(mode="json") for c in record.verification.claims]
            if record and record.verification
            else []
        )
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return
    from common.audit import render_audit_block, render_claims

    if row.error:
        print(f"ERROR · via {row.mode.value} · {row.error}", file=sys.stderr)
    if record is not None and record.verification is not None:
        for line in render_audit_block(record):
            print(line)
        for line in render_claims(record):
            print("  " + line)
        if record.answerability:
            a = record.answerability
            print(f"  ! answerability: the answer denies evidence that may hold it "
                  f"({a.get('confidence_class')}, {a.get('candidate_count')} candidates)")
    else:  # cache hit: the verdict was computed in an earlier run
        print(f"{row.label} · via {row.mode.value} · cached  {row.n_verified}/{row.n_claims}")
