"""Shared set-up for the commands that run jobs (sweep, ask): policy flags,
LLM endpoints (starting the simulator when none is configured), the retriever,
and the in-process services of eager runs."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import ConfigError, InputError
from common.policy import Policy, build_policy, parse_overrides
from common.settings import Settings, results_dir_problem


def results_dir_arg(value: str) -> Path:
    """argparse type of ``--out``: a directory that exists or can be created.

    Raises InputError rather than argparse's error so the message is one line, like
    every other input error.
    """
    problem = results_dir_problem(Path(value))
    if problem:
        raise InputError(f"--out {value}: {problem}")
    return Path(value)


def add_policy_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("policy")
    g.add_argument("--policy", action="append", default=[], metavar="KEY=VALUE",
                   help="override a policy field (repeatable); `qfarm policy` lists them")
    g.add_argument("--no-quantifier-guard", action="store_true", help="quantifier_guard_enabled=false")
    g.add_argument("--allow-broad", action="store_true",
                   help="allow_broad=true: answer broad questions as EXPLORATORY, never rejected, "
                        "and with no cap reduction (their cap is the policy default)")
    g.add_argument("--reject-broad", action="store_true", help="quantifier_reject_broad=true")
    g.add_argument("--apply-quantifier-caps", action="store_true", help="quantifier_guard_apply_caps=true")


def policy_from_args(args: argparse.Namespace) -> Policy:
    overrides = parse_overrides(args.policy)
    if args.no_quantifier_guard:
        overrides["quantifier_guard_enabled"] = False
    if args.allow_broad:
        overrides["allow_broad"] = True
    if args.reject_broad:
        overrides["quantifier_reject_broad"] = True
    if args.apply_quantifier_caps:
        overrides["quantifier_guard_apply_caps"] = True
    return build_policy(overrides)


@dataclass
class Endpoints:
    urls: list[str]
    simulated: bool
    handle: Any = None  # the simulator we started, if any


@contextlib.contextmanager
def llm_endpoints(settings: Settings, *, quiet: bool = False) -> Iterator[Endpoints]:
    """Configured endpoints (checked), or a simulator started for this command."""
    if settings.endpoints:
        from producer.endpoints import probe_endpoints

        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
        probe = probe_endpoints(settings.endpoints, api_key=key)
        yield Endpoints(urls=settings.endpoints, simulated=probe.simulated)
        return
    from ops.sim.launch import start_simulator

    # Zero latency: eager runs call the model one job at a time, and a smoke run should take
    # seconds; the latency model matters for distributed runs and benchmarks.
    handle = start_simulator(latency="zero")
    if not quiet:
        print(f"using the vLLM simulator at {handle.url} (no QFARM_LLM_ENDPOINTS set); "
              "results are SIMULATED", file=sys.stderr)
    try:
        yield Endpoints(urls=[handle.url], simulated=True, handle=handle)
    finally:
        handle.stop()


def open_local_retriever(settings: Settings, *, progress: bool = True) -> Any:
    """The retriever this process will use; builds the embedded default index if needed.

    An embedded index with a damaged page is refused here, before any job runs.
    """
    from worker.retrieval import ensure_default_index, open_retriever
    from worker.retrieval.embedded import check_index_pages

    if settings.retriever == "embedded" and settings.index_path is None:
        ensure_default_index(settings, progress=progress)
    retriever = open_retriever(settings)
    if retriever.backend == "embedded":
        check_index_pages(retriever.path, retriever.describe().get("corpus"))
    return retriever


def eager_services(settings: Settings, retriever: Any) -> tuple[Any, Any]:
    """In-process services for eager runs: Celery eager mode and an in-memory Redis."""
    import fakeredis

    from producer.store import ProducerStore
    from worker.celery_app import configure_app
    from worker.services import Services, install_services
    from worker.store import WorkerStore

    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    configure_app(settings, eager=True)
    svc = Services(settings=settings, store=WorkerStore(client), worker_name="eager",
                   retriever_factory=lambda: retriever)
    install_services(svc)
    return svc, ProducerStore(client)


def require_endpoints_for_workers(settings: Settings) -> None:
    if not settings.endpoints:
        raise ConfigError(
            "QFARM_LLM_ENDPOINTS is not set: distributed runs need the workers' LLM endpoints "
            "(e.g. QFARM_LLM_ENDPOINTS=http://gpu1:8000; start a simulator with `qfarm sim --port 8000`), "
            "or run with --eager"
        )
