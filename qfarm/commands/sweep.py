"""`qfarm sweep`: run question × mode × n jobs, eagerly in-process or through Redis workers.

Parses arguments, shows progress and prints the outcome; the run itself is
``qfarm.producer.api.run_sweep`` / ``follow_run``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from qfarm import question_sets, runtime
from qfarm.commands.export import (
    add_mlflow_flags,
    add_otlp_flags,
    experiment_name,
    is_tracing_on,
    sample_ratio,
)
from qfarm.common.errors import InputError
from qfarm.common.jobs import check_samples, parse_modes
from qfarm.common.logs import log_context
from qfarm.common.models import ALL_MODES
from qfarm.common.reporting.rates import RateWindow
from qfarm.common.settings import Settings, load_settings
from qfarm.common.vocab import ExitCode, RunStatus
from qfarm.producer.api import (
    AFTER_RUN,
    QuestionSet,
    RunOutcome,
    RunResult,
    SweepSpec,
    check_error_rate,
    export_after_run,
    follow_run,
    judge_run,
    record_failure_policy,
    resume_eager,
    retry_errors,
    run_sweep,
)

if TYPE_CHECKING:
    from tqdm import tqdm


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep", help="run a sweep of question × mode × n jobs",
        description=f"Run every question in every mode, n samples each. Exit codes: "
                    f"{ExitCode.OK:d} complete (errored rows within --max-error-rate), "
                    f"{ExitCode.FAILED:d} incomplete or failed, {ExitCode.USAGE:d} bad input, "
                    f"{ExitCode.ROW_ERRORS:d} completed with errored rows, "
                    f"{ExitCode.INTERRUPTED:d} interrupted.",
    )
    p.add_argument("questions", nargs="?", type=Path, help="question file (.txt or .jsonl), or a shipped set's name (qfarm sets)")
    p.add_argument("--modes", default=",".join(m.value for m in ALL_MODES), metavar="MODE[,MODE...]",
                   help="comma-separated modes, from: " + ", ".join(m.value for m in ALL_MODES)
                        + " (default: all three)")
    p.add_argument("-n", type=int, default=1, help="samples per question and mode (default 1)")
    runtime.add_selection_flags(p)
    p.add_argument("--max-error-rate", type=float, default=0.0, metavar="R",
                   help=f"fraction of rows that may error before the run fails with exit {ExitCode.ROW_ERRORS:d} "
                        "(default 0: any errored row fails it; 0.05 tolerates 5%%)")
    p.add_argument("--eager", action="store_true", help="run in this process (no Redis, no workers)")
    p.add_argument("--serial", action="store_true",
                   help="with --eager: one job at a time, each to its row before the next starts (for debugging)")
    p.add_argument("--out", type=runtime.results_dir_arg, default=None, help="results directory (default QFARM_RESULTS_DIR, ./qfarm-runs)")
    p.add_argument("--keep-answers", action="store_true", help="store the answer text in rows")
    p.add_argument("--burn", action="store_true",
                   help="bypass the result cache (whole rows of earlier runs)")
    p.add_argument("--cache", action="store_true", dest="response_cache",
                   help="let the response cache answer model requests asked before (same "
                        "model, server, prompt, sampling and seed), and keep this run's "
                        "complete replies there; off by default (docs/llm.md, 'Response cache')")
    p.add_argument("--resume", metavar="RUN_ID",
                   help="re-enqueue only the jobs of RUN_ID without a row (with --eager: run "
                        "them in this process, for an interrupted eager run)")
    p.add_argument("--retry-errors", metavar="RUN_ID",
                   help="run again, in the same run, only the jobs of RUN_ID whose row is an "
                        "error (under the run's policy, model and index); their new rows "
                        "replace the error rows")
    p.add_argument("--attach", metavar="RUN_ID", help="follow a running sweep again")
    p.add_argument("--detach", action="store_true", help="enqueue and return without following")
    p.add_argument("--wait-for-workers", type=_seconds, nargs="?", const=0.0, default=None,
                   metavar="SECONDS",
                   help="while some of the run's queues have no worker, keep following this "
                        f"long before stopping (exit {ExitCode.FAILED:d}; the jobs stay queued); "
                        "alone: as long as it takes (default QFARM_WAIT_FOR_WORKERS_S, 60)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object as the last line of stdout (run id, status, "
                        "rows, errored rows, exit code, paths); the other lines go to stderr")
    p.add_argument("--json-file", type=Path, metavar="PATH",
                   help="write that JSON object to PATH as well")
    p.add_argument("--export", action="append", choices=AFTER_RUN, default=[], metavar="TARGET",
                   help="after the summary is written, export the run: mlflow (extra "
                        "qfarm[mlflow]; --tracking-uri, --experiment) or otlp, each job a trace "
                        "(extra qfarm[otel]; on by itself with QFARM_OTEL=1 or "
                        "OTEL_EXPORTER_OTLP_ENDPOINT set); a failed export prints a warning and "
                        "does not change the exit code")
    add_mlflow_flags(p, flag=None)
    add_otlp_flags(p, flag=None)
    runtime.add_local_model_flag(p)
    runtime.add_policy_flags(p)
    p.add_argument("--share-samples", action="store_true",
                   help="share_samples=true: the -n samples of a question and mode go in one "
                        "request with n choices (the prompt read once); sample i is seeded "
                        "as choice i of that request (docs/llm.md, 'Shared samples')")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_error_rate(args.max_error_rate)
    settings = load_settings()
    if args.out is not None:
        settings = settings.model_copy(update={"results_dir": args.out})
    if args.wait_for_workers is not None:
        if args.eager:
            raise InputError("--wait-for-workers is for runs on workers; an --eager run has none")
        settings = settings.model_copy(update={"wait_for_workers_s": args.wait_for_workers})
    if is_tracing_on(settings):  # a distributed run's workers then trace it live
        settings = settings.model_copy(update={"otel": True,
                                               "otel_sample_ratio": sample_ratio(args, settings)})
    bar = _ProgressBar(args.quiet)
    try:
        if args.retry_errors:
            result = _retry(args, settings, bar)
        elif args.resume and args.eager:
            result = resume_eager(args.resume, settings=settings, on_progress=bar.show,
                                  serial=args.serial,
                                  endpoints=lambda s: runtime.llm_endpoints(s, quiet=False))
        elif args.resume or args.attach:
            result = follow_run(args.resume or args.attach, resend_missing=bool(args.resume),
                                settings=settings, on_progress=bar.show, say=bar.say)
        else:
            result = _sweep(args, settings, bar)
    finally:
        bar.close()
    # `qfarm report` judges the run again by the same rate.
    record_failure_policy(result.run_dir, args.max_error_rate)
    outcome = judge_run(result, args.max_error_rate, detached=args.detach)
    with log_context(run_id=result.run_id):  # the run's last lines carry its id in the logs
        code = _report(result, detached=args.detach, outcome=outcome,
                       out=sys.stderr if args.json else sys.stdout)
    _export(args, settings, result)
    record = json.dumps(outcome.as_json(), ensure_ascii=False)
    if args.json_file:
        args.json_file.write_text(record + "\n", encoding="utf-8")
    if args.json:
        print(record, flush=True)
    return code


def _seconds(text: str) -> float:
    """``--wait-for-workers SECONDS``: a finite number of seconds, 0 or more."""
    value = runtime.non_negative(text)
    if value is None:
        raise InputError(
            f"--wait-for-workers {text}: seconds, a finite number of 0 or more, e.g. "
            "--wait-for-workers 600 (alone, as the last option or before another, it waits as "
            "long as it takes; the question file goes before it)")
    return value


def _export(args: argparse.Namespace, settings: Settings, result: RunResult) -> None:
    """``--export`` (and traces with QFARM_OTEL=1) once the run has ended and its summary is
    written; a failed export is one warning line, even with --quiet, never the exit code."""
    tracing = is_tracing_on(settings) and "otlp" not in args.export
    targets = [*args.export, *(["otlp"] if tracing else [])]
    if not targets:
        return
    if args.detach:
        print(f"qfarm: note: --export runs when a sweep ends; once run {result.run_id} has "
              f"ended, `qfarm export {result.run_id} --{targets[0]}` exports it", file=sys.stderr)
        return
    _, failed = export_after_run(result.run_dir, targets, tracking_uri=args.tracking_uri,
                                 experiment=experiment_name(args),
                                 otlp_endpoint=args.otlp_endpoint,
                                 sample_ratio=sample_ratio(args, settings))
    for line in failed:
        print(f"qfarm: warning: {line}", file=sys.stderr)


def _check_writable(path: Path) -> None:
    """``InputError`` unless ``path`` can be written (its folder exists, it is no folder)."""
    if path.is_dir() or not path.parent.is_dir():
        raise InputError(f"--json-file {path}: {'is a directory' if path.is_dir() else 'no such folder'}; "
                         "give a file in an existing folder")
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InputError(f"--json-file {path}: not writable; give a file you may write")


def _sweep(args: argparse.Namespace, settings, bar: _ProgressBar) -> RunResult:
    if args.questions is None:
        raise InputError("give a question file or a shipped set, e.g. qfarm sweep smoke --eager")
    # Validate the cheap things first: nothing starts for a typo.
    modes = parse_modes(args.modes)
    policy = runtime.policy_from_args(args)
    check_samples(args.n)
    if args.serial and not args.eager:
        raise InputError("--serial runs jobs one at a time in this process: use it with --eager")
    if args.local_model and not args.eager:
        raise InputError(
            "--local-model starts the server for this process only: use it with --eager, or "
            "start it with `qfarm local-model` and give the workers the variables it prints"
        )
    if args.json_file is not None:
        _check_writable(args.json_file)  # before anything is enqueued
    questions = QuestionSet.from_file(question_sets.resolve(args.questions), settings.max_question_chars)
    spec = SweepSpec(questions=questions, modes=modes, n=args.n,
                     policy=policy, keep_answers=args.keep_answers, use_cache=not args.burn,
                     response_cache=args.response_cache, limit=args.limit, sample=args.sample, seed=args.seed)
    return run_sweep(spec, eager=args.eager, detach=args.detach, settings=settings, serial=args.serial,
                     on_progress=bar.show, say=bar.say, index_progress=not args.quiet,
                     endpoints=lambda s: runtime.llm_endpoints(s, quiet=not args.eager,
                                                               local_model=args.local_model))


def _retry(args: argparse.Namespace, settings, bar: _ProgressBar) -> RunResult:
    if args.resume or args.attach or args.questions is not None:
        raise InputError("--retry-errors RUN_ID takes the run's own questions and options: "
                         "give it alone (with --eager to run the jobs in this process)")
    given = (args.policy or args.no_quantifier_guard or args.allow_broad or args.reject_broad
             or args.apply_quantifier_caps or args.structured_output or args.local_model
             or args.share_samples)
    return retry_errors(args.retry_errors, eager=True if args.eager else None, settings=settings,
                        policy=runtime.policy_from_args(args) if given else None,
                        on_progress=bar.show, say=bar.say, serial=args.serial,
                        endpoints=lambda s: runtime.llm_endpoints(s, quiet=not args.eager,
                                                                  local_model=args.local_model))


def _report(result: RunResult, *, detached: bool, outcome: RunOutcome | None = None,
            out: TextIO | None = None) -> int:
    """Print how the run ended; returns its exit code (``qfarm.producer.api.judge_run``)."""
    outcome = outcome or judge_run(result, detached=detached)
    code = int(outcome.exit_code)
    out = out or sys.stdout
    run_id = result.run_id
    if result.status == RunStatus.ENQUEUE_INTERRUPTED:
        _err(f"\ninterrupted while enqueueing run {run_id}; send the rest with: "
             f"qfarm sweep --resume {run_id}")
        return code
    if result.status == RunStatus.RUNNING and detached:
        _err(f"detached; follow with: qfarm sweep --attach {run_id}")
        return code
    if result.status == RunStatus.INTERRUPTED and result.error:  # a retry that stopped
        _err(f"\ninterrupted: {result.error}")
        return code
    if result.status == RunStatus.INTERRUPTED and result.manifest.eager:
        _err(f"\ninterrupted: run {run_id} stopped with {result.rows_written} of "
             f"{result.manifest.n_jobs} jobs done (rows: {result.rows_path}); run the rest "
             f"with: qfarm sweep --resume {run_id} --eager")
        return code
    if result.status == RunStatus.INTERRUPTED:
        _err(f"\ndetached; the run goes on. Re-attach with: qfarm sweep --attach {run_id}"
             f"  (cancel with: qfarm cancel {run_id})")
        return code
    if result.status == RunStatus.DETACHED:
        _err(f"\nrun {run_id}: {result.error}; detached (workers carry on once Redis is back). "
             f"Re-attach with: qfarm sweep --attach {run_id}")
        return code
    if result.status == RunStatus.NO_WORKER:
        _err(f"\nrun {run_id}: {result.error}. Stopped following with {result.rows_written} of "
             f"{result.manifest.n_jobs} jobs done; nothing is lost, the jobs stay queued. Once a "
             f"worker runs, pick the run up with: qfarm sweep --attach {run_id}  (or --resume "
             f"{run_id} to send again jobs that lost their message; cancel with: qfarm cancel "
             f"{run_id})")
        return code
    if result.status == RunStatus.FAILED:
        _err(f"run {run_id} failed: {result.error}")
        return code
    if result.status == RunStatus.CANCELLED:
        _err(f"run {run_id} was cancelled: {result.jobs_without_row} jobs have no row")
    print(f"rows:    {result.rows_path}  ({result.rows_written}/{result.manifest.n_jobs} jobs)",
          file=out)
    print(f"summary: {result.summary}", file=out)
    if result.status == RunStatus.INCOMPLETE:
        how = (f"qfarm sweep --resume {run_id} --eager" if result.manifest.eager
               else f"qfarm sweep --resume {run_id}")
        _err(f"run {run_id} is incomplete: {result.jobs_without_row} of "
             f"{result.manifest.n_jobs} jobs have no row; run them with: {how}")
        return code
    if outcome.reason:
        _err(outcome.reason)
    return code


def _err(line: str) -> None:
    print(line, file=sys.stderr)


class _ProgressBar:
    """A tqdm bar on stderr, created at the first progress report (when the total is known)."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.bar: tqdm | None = None
        self.window = RateWindow()

    def show(self, prog) -> None:
        if self.bar is None:
            from tqdm import tqdm  # imported late: only runs that report progress need it

            self.bar = tqdm(total=prog.total, unit="job", disable=self.quiet, file=sys.stderr,
                            dynamic_ncols=True)
        self.window.add(time.monotonic(), prog.stages)
        rate = self.window.rates()
        self.bar.set_postfix_str(
            " ".join([f"failed={prog.failed}", *(f"{k}={r:.1f}/s" for k, r in rate.items())]),
            refresh=False,
        )
        self.bar.update(max(0, prog.done - self.bar.n))

    def say(self, line: str) -> None:
        if self.bar is not None:
            self.bar.clear()
        print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
