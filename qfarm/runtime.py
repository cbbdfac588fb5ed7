"""Shared set-up for the commands that run jobs (sweep, ask): policy flags and
LLM endpoints (starting the simulator when none is configured, or the local model
with ``--local-model``)."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from qfarm.common.errors import InputError, PolicyError
from qfarm.common.policy import LOCAL_CPU_POLICY, Policy, build_policy, parse_overrides
from qfarm.common.settings import Settings, results_dir_problem
from qfarm.common.vocab import Backend
from qfarm.producer.api import Endpoints, configured_endpoints

BACKENDS = tuple(b.value for b in Backend)  # plain strings: argparse shows their repr


def add_retrieval_flags(p: argparse.ArgumentParser, *, many_backends: bool = False) -> None:
    """--top-k, --title-boost and --backend, as `search` and `eval-retrieval` take them."""
    defaults = Policy()
    p.add_argument(
        "--top-k",
        type=int,
        default=defaults.top_k,
        metavar="K",
        help=f"passages per question (default {defaults.top_k}, the policy's top_k)",
    )
    p.add_argument(
        "--title-boost",
        type=float,
        default=defaults.title_boost,
        metavar="B",
        help=f"weight of the title field (default {defaults.title_boost:g})",
    )
    if many_backends:
        p.add_argument("--backend", action="append", choices=BACKENDS,
                       help="backend to measure (repeatable; default: QFARM_RETRIEVER)")
    else:
        p.add_argument("--backend", choices=BACKENDS,
                       help="search backend (default: QFARM_RETRIEVER)")


def add_selection_flags(p: argparse.ArgumentParser) -> None:
    """--limit, --sample and --seed: run part of a question file (chosen before the
    questions are expanded into jobs; a sweep's manifest records which)."""
    g = p.add_argument_group("question selection (default: every question of the file)")
    g.add_argument("--limit", type=int, metavar="N",
                   help="only the first N questions of the file")
    g.add_argument("--sample", type=int, metavar="N",
                   help="N questions drawn by --seed, kept in file order (the same N for the "
                        "same seed and file on any machine)")
    g.add_argument("--seed", type=int, metavar="S",
                   help="which questions --sample draws (default 0)")


def check_retrieval_flags(args: argparse.Namespace) -> None:
    """The policy's own ranges (finite, bounded): retrieval commands refuse what a sweep refuses."""
    try:
        build_policy({"top_k": args.top_k, "title_boost": args.title_boost})
    except PolicyError as exc:
        message = str(exc).replace("--policy top_k", "--top-k")
        raise PolicyError(message.replace("--policy title_boost", "--title-boost")) from exc


def results_dir_arg(value: str) -> Path:
    """argparse type of ``--out``: a directory that exists or can be created.

    Raises InputError rather than argparse's error so the message is one line, like
    every other input error.
    """
    problem = results_dir_problem(Path(value))
    if problem:
        raise InputError(f"--out {value}: {problem}")
    # The nearest folder that exists must take a new folder: permissions alone do not say
    # (root passes every check, and /proc or a read-only mount still refuse).
    existing = next(p for p in (Path(value).absolute(), *Path(value).absolute().parents) if p.exists())
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".qfarm-probe-", dir=existing))
    except OSError as exc:
        raise InputError(f"--out {value}: cannot create folders in {existing} ({exc.strerror}); "
                         "give a directory you may write") from None
    return Path(value)


def non_negative(text: str) -> float | None:
    """``text`` as a finite number of 0 or more (seconds, days), or None when it is not one:
    the caller's error names its flag."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def port_arg(value: str) -> int:
    """argparse type of ``--port``: 0 (any free port) to 65535, as one line like every
    other input error (a port out of range was a traceback from the socket call)."""
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise InputError(f"--port {value}: a TCP port is a number from 0 to 65535 (0: any free "
                         "port), e.g. --port 8080")
    return port


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
    g.add_argument("--structured-output", action="store_true",
                   help="structured_output=true: each request carries its mode's grammar (the "
                        "prompt's evidence ids, the claim cap) and the server decodes only text "
                        "it admits; the verifier judges the answers as ever")


def add_local_model_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--local-model", action="store_true",
        help="start llama.cpp's server on the local CPU model (make install-local) for this "
             "command and answer with it; the CPU policy (fewer, shorter passages, a small "
             "max_tokens) applies under any --policy overrides",
    )


def policy_from_args(args: argparse.Namespace) -> Policy:
    overrides = parse_overrides(args.policy)
    if getattr(args, "local_model", False):
        # The operator's own --policy values still win over the CPU policy.
        overrides = {**LOCAL_CPU_POLICY, **overrides}
    if args.no_quantifier_guard:
        overrides["quantifier_guard_enabled"] = False
    if args.allow_broad:
        overrides["allow_broad"] = True
    if args.reject_broad:
        overrides["quantifier_reject_broad"] = True
    if args.apply_quantifier_caps:
        overrides["quantifier_guard_apply_caps"] = True
    if args.structured_output:
        overrides["structured_output"] = True
    if getattr(args, "share_samples", False):  # sweep's flag (ask has one sample)
        overrides["share_samples"] = True
    return build_policy(overrides)


@contextlib.contextmanager
def llm_endpoints(settings: Settings, *, quiet: bool = False,
                  local_model: bool = False) -> Iterator[Endpoints]:
    """Configured endpoints (checked), or a simulator started for this command, or with
    ``local_model`` the local model's server (whatever QFARM_LLM_ENDPOINTS says)."""
    if local_model:
        with local_model_endpoints(quiet=quiet) as eps:
            yield eps
        return
    if settings.endpoints:
        with configured_endpoints(settings) as eps:
            yield eps
        return
    from qfarm.ops.sim.launch import start_simulator

    # Zero latency: eager runs call the model one job at a time, and a smoke run should take
    # seconds; the latency model matters for distributed runs and benchmarks.
    handle = start_simulator(latency="zero")
    if not quiet:
        print(f"using the vLLM simulator at {handle.url} (no QFARM_LLM_ENDPOINTS set); "
              "results are SIMULATED", file=sys.stderr)
    try:
        yield Endpoints(urls=[handle.url], simulated=True)
    finally:
        handle.stop()


@contextlib.contextmanager
def local_model_endpoints(*, quiet: bool = False) -> Iterator[Endpoints]:
    """llama.cpp's server on the local model, started for this command and stopped after."""
    from qfarm.ops.local.launch import start_local_model

    if not quiet:
        print("starting llama.cpp's server on the local model (CPU; about 20 s a job)...",
              file=sys.stderr)
    with start_local_model() as handle:
        if not quiet:
            print(f"using {handle.model} at {handle.url}: {handle.description}", file=sys.stderr)
        yield Endpoints(urls=[handle.url], simulated=False, server=handle.description,
                        settings=handle.settings_overrides())
