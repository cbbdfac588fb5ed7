"""qfarm's Celery app with the LLM stage answered in-process, for bench/perf/worker_cpu.py.

``celery -A bench.perf.cpu_app worker`` runs the product's tasks unchanged, except that
each process's gateway is a canned one: it composes the simulator's answer for each
prompt in-process (``qfarm.ops.sim.behaviour.complete``, deterministic for a prompt and seed)
instead of sending it over HTTP. What the workers spend is then retrieval, prompts,
verification, rows and messaging, the worker's own work; the answers' composition is
timed per thread and written to ``$QFARM_BENCH_CANNED_DIR/<pid>`` so the benchmark can
subtract it (it is the model's work, not the worker's).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import bench.perf.noop_app  # noqa: F401  (registers the no-op task the baselines send)
from qfarm.common.errors import ServiceError
from qfarm.common.models import Generation, LlmRequest, Sampling, Usage
from qfarm.ops.sim.behaviour import complete
from qfarm.ops.sim.constraints import grammar_constraint
from qfarm.worker import services
from qfarm.worker.celery import app

CANNED_DIR_ENV = "QFARM_BENCH_CANNED_DIR"


class CannedGateway:
    """``qfarm.worker.pipeline.Gateway`` answering with the simulator's composer, in-process."""

    def __init__(self, out: Path | None):
        self._out = out
        self._lock = threading.Lock()
        self._spent_s = 0.0

    def generate_many(
        self, items: list[tuple[str, Sampling, str]]
    ) -> list[Generation | ServiceError]:
        t0 = time.thread_time()
        out: list[Generation | ServiceError] = []
        for prompt, sampling, _job_id in items:
            sent = time.time()
            done = complete(prompt, seed=sampling.seed, choice_index=0,
                            temperature=sampling.temperature, max_tokens=sampling.max_tokens,
                            stop=list(sampling.stop),
                            constraint=grammar_constraint(sampling.grammar))
            # Every answered row names its request (the cost table refuses one that does not).
            request = LlmRequest(sent_at=sent, ms=(time.time() - sent) * 1000.0)
            out.append(Generation(text=done.text, finish_reason=done.finish_reason,
                                  endpoint="canned", simulated=True, request=request,
                                  usage=Usage(completion_tokens=done.completion_tokens)))
        with self._lock:
            self._spent_s += time.thread_time() - t0
            if self._out is not None:
                self._out.write_text(f"{self._spent_s:.6f}")
        return out

    def close(self) -> None:
        return None


def _build_with_canned_gateway(settings=None):  # type: ignore[no-untyped-def]
    svc = _build(settings)
    out_dir = os.environ.get(CANNED_DIR_ENV)
    gateway = CannedGateway(Path(out_dir) / str(os.getpid()) if out_dir else None)
    svc.gateway_factory = lambda: gateway
    return svc


_build = services.build_services
services.build_services = _build_with_canned_gateway

celery = app
__all__ = ["CANNED_DIR_ENV", "CannedGateway", "app", "celery"]
