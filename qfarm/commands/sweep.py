"""`qfarm sweep`: run question × mode × n jobs, eagerly in-process or through Redis workers."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from common.errors import InputError
from common.jobs import parse_modes
from common.models import ALL_MODES
from common.settings import Settings, load_settings
from producer.capacity import check_plan_fits
from qfarm import runtime


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run a sweep of question × mode × n jobs")
    p.add_argument("questions", nargs="?", type=Path, help="question file (.txt or .jsonl)")
    p.add_argument("--modes", default=",".join(m.value for m in ALL_MODES))
    p.add_argument("-n", type=int, default=1, help="samples per question and mode")
    p.add_argument("--eager", action="store_true", help="run in this process (no Redis, no workers)")
    p.add_argument("--out", type=runtime.results_dir_arg, default=None, help="results directory (default bench/results)")
    p.add_argument("--keep-answers", action="store_true", help="store the answer text in rows")
    p.add_argument("--burn", action="store_true", help="bypass the result cache")
    p.add_argument("--resume", metavar="RUN_ID", help="re-enqueue only the jobs of RUN_ID without a row")
    p.add_argument("--attach", metavar="RUN_ID", help="follow a running sweep again")
    p.add_argument("--detach", action="store_true", help="enqueue and return without following")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    runtime.add_policy_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = load_settings()
    if args.out is not None:
        settings = settings.model_copy(update={"results_dir": args.out})
    if args.resume or args.attach:
        return _resume_or_attach(args, settings)
    if args.questions is None:
        raise InputError("give a question file, e.g. qfarm sweep bench/questions/smoke.txt --eager")
    # Validate the cheap things first: nothing starts for a typo.
    modes = parse_modes(args.modes)
    policy = runtime.policy_from_args(args)
    if args.n < 1:
        raise InputError(f"-n {args.n}: the number of samples must be at least 1")
    from producer.sweep import load_questions

    loaded = load_questions(args.questions)
    if args.eager:
        return _run_eager(args, settings, modes, policy, loaded)
    return _run_distributed(args, settings, modes, policy, loaded)


def _plan(args, settings: Settings, modes, policy, loaded, *, run_id, endpoints, simulated,
          retriever, eager):
    from producer.sweep import plan_sweep

    questions, digest = loaded
    describe = getattr(retriever, "describe", lambda: {})()
    return plan_sweep(
        run_id=run_id,
        questions_path=args.questions,
        questions=questions,
        digest=digest,
        modes=modes,
        n=args.n,
        policy=policy,
        model=settings.model,
        endpoints=endpoints,
        simulated=simulated,
        retriever=retriever.backend,
        index_version=retriever.index_version(),
        corpus=str(describe.get("corpus") or describe.get("index") or "default"),
        eager=eager,
        keep_answers=args.keep_answers,
        use_cache=not args.burn,
    )


def _run_eager(args, settings: Settings, modes, policy, loaded) -> int:
    from producer.aggregator import Aggregator
    from producer.runs import create_run_dir, new_run_id, update_run_status
    from producer.sweep import enqueue_jobs
    from worker.celery_app import app

    retriever = runtime.open_local_retriever(settings, progress=not args.quiet)
    with runtime.llm_endpoints(settings) as eps:
        settings = settings.model_copy(update={"llm_endpoints": ",".join(eps.urls)})
        svc, store = runtime.eager_services(settings, retriever)
        plan = _plan(args, settings, modes, policy, loaded, run_id=new_run_id(), endpoints=eps.urls,
                     simulated=eps.simulated, retriever=retriever, eager=True)
        check_plan_fits(plan.manifest, settings)
        run_dir = create_run_dir(settings.results_dir, plan.manifest)
        store.put_manifest(plan.manifest)
        update_run_status(run_dir, status="running", started_at=time.time())
        agg = Aggregator(store, plan.manifest.run_id, run_dir / "rows.jsonl")
        bar = _progress_bar(plan.manifest.n_jobs, args.quiet)
        try:
            for job in plan.jobs():
                enqueue_jobs(app, [job])  # eager: runs every stage inline
                agg.drain()
                bar.update(agg.written - bar.n)
        finally:
            bar.close()
            svc.close()
        agg.drain()
    error = store.progress(plan.manifest.run_id, plan.manifest.n_jobs).error
    if error:
        update_run_status(run_dir, status="failed", error=error, rows=agg.written)
        print(f"run {plan.manifest.run_id} failed: {error}", file=sys.stderr)
        return 1
    return _finish(run_dir, plan.manifest.n_jobs, agg.written)


def _run_distributed(args, settings: Settings, modes, policy, loaded) -> int:
    from producer.runs import create_run_dir, new_run_id, update_run_status
    from producer.store import ProducerStore, connect
    from producer.sweep import enqueue_jobs
    from worker.celery_app import configure_app

    runtime.require_endpoints_for_workers(settings)
    client = connect(settings.redis_url)
    retriever = runtime.open_local_retriever(settings, progress=not args.quiet)
    with runtime.llm_endpoints(settings, quiet=True) as eps:
        simulated = eps.simulated
    plan = _plan(args, settings, modes, policy, loaded, run_id=new_run_id(), endpoints=eps.urls,
                 simulated=simulated, retriever=retriever, eager=False)
    check_plan_fits(plan.manifest, settings, client)
    app = configure_app(settings)
    store = ProducerStore(client)
    run_dir = create_run_dir(settings.results_dir, plan.manifest)
    store.put_manifest(plan.manifest)
    update_run_status(run_dir, status="enqueueing", started_at=time.time())
    t0 = time.perf_counter()
    try:
        sent = enqueue_jobs(app, plan.jobs(), bundle_size=settings.bundle_size)
    except KeyboardInterrupt:
        update_run_status(run_dir, status="enqueue interrupted")
        print(f"\ninterrupted while enqueueing run {plan.manifest.run_id}; send the rest with: "
              f"qfarm sweep --resume {plan.manifest.run_id}", file=sys.stderr)
        return 130
    elapsed = time.perf_counter() - t0
    update_run_status(run_dir, status="running", enqueued=sent)
    print(f"run {plan.manifest.run_id}: enqueued {sent} jobs in {elapsed:.2f}s "
          f"({sent / max(elapsed, 1e-9):,.0f} jobs/s)", file=sys.stderr)
    if args.detach:
        print(f"detached; follow with: qfarm sweep --attach {plan.manifest.run_id}", file=sys.stderr)
        return 0
    return _follow(store, run_dir, plan.manifest, args.quiet, settings,
                   reconcile=_reconciler(app, plan, store, settings.bundle_size))


def _resume_or_attach(args, settings: Settings) -> int:
    from producer.runs import read_manifest
    from producer.store import ProducerStore, connect
    from producer.sweep import SweepPlan, enqueue_jobs, load_questions, missing_jobs
    from worker.celery_app import configure_app

    run_id = args.resume or args.attach
    run_dir = settings.results_dir / run_id
    if not (run_dir / "manifest.json").exists():
        raise InputError(f"run {run_id}: no {run_dir}/manifest.json; pass --out with the results dir")
    manifest = read_manifest(run_dir)
    if manifest.eager:
        raise InputError(f"run {run_id} was an eager run; eager runs cannot be resumed, rerun it")
    store = ProducerStore(connect(settings.redis_url))
    if not store.has_manifest(run_id):
        store.put_manifest(manifest)  # Redis lost it (restart): restore before re-enqueueing
    app = configure_app(settings)
    plan = None
    try:
        questions, digest = load_questions(Path(manifest.question_file))
        if digest != manifest.question_file_digest:
            raise InputError(
                f"{manifest.question_file}: changed since run {run_id} started "
                f"({digest} != {manifest.question_file_digest}); restore it or start a new sweep"
            )
        plan = SweepPlan(manifest=manifest, questions=questions)
    except InputError:
        if args.resume:
            raise
        print(f"warning: {manifest.question_file} is gone or changed; following run {run_id} "
              "without re-sending lost jobs", file=sys.stderr)
    from producer.lease import FollowerLease

    lease = FollowerLease(store.client, run_id)
    recovered = None
    if args.resume:
        runtime.require_endpoints_for_workers(settings)
        recovered = _recover(store, run_dir, manifest, lease)
        sent = enqueue_jobs(app, missing_jobs(plan, store), bundle_size=settings.bundle_size)
        print(f"run {run_id}: re-enqueued {sent} jobs without a row", file=sys.stderr)
    reconcile = _reconciler(app, plan, store, settings.bundle_size) if plan else None
    return _follow(store, run_dir, manifest, args.quiet, settings, reconcile=reconcile,
                   recovered=recovered, lease=lease)


def _recover(store, run_dir: Path, manifest, lease) -> dict[str, int]:
    """Before re-sending jobs: rows only in rows.jsonl go back to Redis (it lost them in a
    restart), rows only in Redis go into rows.jsonl (if no other follower drains the run)."""
    from producer.aggregator import Aggregator

    agg = Aggregator(store, manifest.run_id, run_dir / "rows.jsonl")
    from_file = agg.restore_to_redis()
    from_redis = agg.drain() if lease.hold() else 0
    print(f"run {manifest.run_id}: recovered {from_file} rows from rows.jsonl and "
          f"{from_redis} from Redis", file=sys.stderr)
    return {"rows_recovered_from_file": from_file, "rows_recovered_from_redis": from_redis}


def _reconciler(app, plan, store, bundle_size: int):
    from producer.sweep import reconcile_run

    def reconcile() -> int:
        sent = reconcile_run(app, plan, store, bundle_size=bundle_size)
        if sent:
            print(f"\nrun {plan.manifest.run_id}: {sent} jobs had no row and no message left "
                  "(lost with a killed worker or a Redis restart); re-enqueued them", file=sys.stderr)
        return sent

    return reconcile


def _follow(store, run_dir: Path, manifest, quiet: bool, settings: Settings, reconcile=None,
            recovered: dict[str, int] | None = None, lease=None) -> int:
    from producer.lease import FollowerLease
    from producer.runs import update_run_status
    from producer.sweep import Follower, RedisGone

    run_id, total = manifest.run_id, manifest.n_jobs
    bar = _progress_bar(total, quiet)
    t0, first = time.monotonic(), None

    def say(line: str) -> None:
        bar.clear()
        print(line, file=sys.stderr, flush=True)

    def show(prog) -> None:
        nonlocal first
        if first is None:
            first = prog.stages
        rate = {k: (v - first[k]) / max(time.monotonic() - t0, 1e-9) for k, v in prog.stages.items()}
        bar.set_postfix_str(
            f"failed={prog.failed} " + " ".join(f"{k}={r:.1f}/s" for k, r in rate.items()), refresh=False
        )
        bar.update(max(0, prog.done - bar.n))

    follower = Follower(store, manifest, run_dir / "rows.jsonl",
                        lease=lease or FollowerLease(store.client, run_id), reconcile=reconcile, say=say,
                        reconnect_s=settings.redis_reconnect_s)
    try:
        prog = follower.run(on_progress=show)
    except KeyboardInterrupt:
        bar.close()
        follower.release()
        print(f"\ndetached; the run goes on. Re-attach with: qfarm sweep --attach {run_id}"
              f"  (cancel with: qfarm cancel {run_id})", file=sys.stderr)
        return 130
    except RedisGone as exc:
        bar.close()
        update_run_status(run_dir, status="detached: Redis unreachable")
        print(f"\nrun {run_id}: {exc}; detached (workers carry on once Redis is back). "
              f"Re-attach with: qfarm sweep --attach {run_id}", file=sys.stderr)
        return 1
    bar.close()
    written = follower.aggregator.written if follower.aggregator else 0
    extra = dict(recovered or {})
    if follower.restored:
        extra["rows_restored_to_redis"] = follower.restored
    if prog.error:
        follower.release()
        update_run_status(run_dir, status="failed", error=prog.error, rows=written, **extra)
        print(f"run {run_id} failed: {prog.error}", file=sys.stderr)
        return 1
    if prog.cancelled:
        print(f"run {run_id} was cancelled: {total - prog.done} jobs have no row", file=sys.stderr)
    try:
        return _finish(run_dir, total, written, cancelled=prog.cancelled, **extra)
    finally:
        follower.release()


def _finish(run_dir: Path, total: int, written: int, *, cancelled: bool = False,
            **status: object) -> int:
    from bench.reporting import write_summary
    from producer.runs import update_run_status

    state = "complete" if written >= total else ("cancelled" if cancelled else "incomplete")
    # ``written`` counts distinct job ids: the run is complete when every planned job has a row.
    update_run_status(run_dir, status=state, finished_at=time.time(), rows=written, **status)
    summary = write_summary(run_dir)
    print(f"rows:    {run_dir / 'rows.jsonl'}  ({written}/{total} jobs)")
    print(f"summary: {summary}")
    return 0


def _progress_bar(total: int, quiet: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="job", disable=quiet, file=sys.stderr, dynamic_ncols=True)
