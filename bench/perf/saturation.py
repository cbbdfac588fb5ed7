"""Endpoint saturation: how close the gateway gets to what two endpoints can serve.

Two simulated vLLM endpoints with a known capacity (``max_num_seqs``) and
latency model (TTFT 60–120 ms, 10–15 ms per output token: the published
8B-on-H100 profile) serve a sweep of evidence prompts. Printed:

* achieved requests/s ÷ ideal, where ideal = Σ over endpoints of capacity ÷
  mean time a sequence holds a slot (mean TTFT + (mean output tokens − 1) ×
  mean per-token time; the first token arrives at TTFT). The mean output
  tokens are measured from the replies' usage in the same run;
* the speed-up over running the same jobs one at a time (the serial harness
  this replaces), measured on a sample of jobs;
* batched (micro-batcher, prompt lists) vs unbatched at the same concurrency,
  with greedy sampling so prompts can share a request (with per-job seeds at
  temperature > 0 they cannot: the seed is request-level in vLLM).

The driver is a function (``DRIVERS``) so the thread pool used here (the way
a Celery ``threads`` worker calls the gateway) can be swapped for a driver
that goes through the distributed farm. Figures are printed, never asserted.
What the endpoints are *charged* (prefill, decode, the prefix cache) rather than how
full they are kept: ``bench.perf.sharing``.
``saturation_ratio=<x>`` is the last line.

    .venv/bin/python -m bench.perf.saturation [--jobs 1000] [--quick]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from qfarm.common.errors import ServiceError
from qfarm.common.grounding.prompts import build_prompt
from qfarm.common.models import Evidence, Generation, Mode, Sampling
from qfarm.common.policy import Policy
from qfarm.common.settings import Settings
from qfarm.ops.sim.latency import LatencyModel
from qfarm.ops.sim.launch import SimulatorHandle, start_simulator
from qfarm.producer.api import QuestionSet, SweepSpec
from qfarm.worker.llm import open_gateway

Item = tuple[str, Sampling, str]  # prompt, sampling, job id


@dataclass(frozen=True)
class EndpointSpec:
    max_num_seqs: int
    latency: LatencyModel = LatencyModel()


@dataclass
class RunResult:
    label: str
    n_jobs: int
    wall_s: float
    errors: int
    completion_tokens: int
    by_endpoint: Counter[str]
    mean_batch_size: float = 0.0
    done_at: list[float] | None = None  # completion times since the start, seconds
    last_start_s: float = 0.0  # when the last job was handed to the gateway
    cpu_s: float = 0.0  # client CPU: this process, plus the workers for the farm
    started_epoch: float = 0.0  # time.time() when the driver's timed part began

    def steady_rps(self) -> float:
        """Completions per second until the last job was sent (excludes the final drain)."""
        if not self.done_at or not self.last_start_s:
            return self.rps
        return sum(1 for t in self.done_at if t <= self.last_start_s) / self.last_start_s

    @property
    def rps(self) -> float:
        return self.n_jobs / self.wall_s if self.wall_s else 0.0

    @property
    def mean_output_tokens(self) -> float:
        done = self.n_jobs - self.errors
        return self.completion_tokens / done if done else 0.0


Driver = Callable[[Sequence[str], Sequence[Item], int, dict[str, object]], RunResult]


# --------------------------------------------------------------------------- workload

WORDS = (
    "river castle empire painter treaty harbour merchant council cathedral railway novelist "
    "composer glacier province dynasty festival observatory monastery parliament vineyard"
).split()
NAMES = "Aldous Beatrix Casimir Delphine Evander Florian Gisela Horatio Isolde Jasper".split()
PLACES = "Arlen Brevik Castellan Dorn Elsmere Falkirk Grisham Halden Ivarsk Jorvik".split()


def synthetic_evidence(rng: random.Random, k: int = 6) -> list[Evidence]:
    """Encyclopedia-like blocks: several plain sentences each, so answers quote whole ones."""
    blocks = []
    for i in range(1, k + 1):
        place = rng.choice(PLACES)
        sentences = [
            f"The {rng.choice(WORDS)} of {place} was founded in {rng.randint(1100, 1990)} by "
            f"{rng.choice(NAMES)} {rng.choice(PLACES)}son after a long dispute over the {rng.choice(WORDS)}."
            for _ in range(rng.randint(3, 5))
        ]
        text = " ".join(sentences)
        blocks.append(Evidence(id=f"E{i}", doc_id=f"doc{i}", chunk_id=f"doc{i}-0", title=place,
                               text=text, score=10.0 - i, offset_start=0, offset_end=len(text)))  # fmt: skip
    return blocks


def make_items(n: int, *, greedy: bool, seed: int = 7) -> list[Item]:
    rng = random.Random(seed)
    modes = list(Mode)
    items = []
    for i in range(n):
        evidence = synthetic_evidence(rng)
        question = f"Who founded the {rng.choice(WORDS)} of {evidence[0].title}?"
        prompt = build_prompt(question, modes[i % 3], evidence, Policy()).text
        sampling = Sampling(
            temperature=0.0 if greedy else 0.7, max_tokens=512, seed=rng.getrandbits(31)
        )
        items.append((prompt, sampling, f"job-{i}"))
    return items


# --------------------------------------------------------------------------- drivers


def drive_thread_pool(
    urls: Sequence[str], items: Sequence[Item], concurrency: int, settings: dict[str, object]
) -> RunResult:
    """Many threads calling one gateway, as a Celery ``threads`` worker does.

    The generate stage alone, so not through the run API: a sweep would add retrieval,
    verification and queues to what this driver isolates."""
    cpu0 = process_cpu_s()
    gw = open_gateway(Settings(llm_endpoints=",".join(urls), **settings))  # type: ignore[arg-type]
    by_endpoint: Counter[str] = Counter()
    errors = tokens = 0
    done_at: list[float] = []
    last_start = 0.0
    try:

        def one(item: Item) -> None:
            nonlocal errors, tokens, last_start
            prompt, sampling, job_id = item
            last_start = max(last_start, time.perf_counter() - t0)
            try:
                g = gw.generate(prompt, sampling, job_id=job_id)
            except ServiceError:
                errors += 1
                return
            finally:
                done_at.append(time.perf_counter() - t0)
            by_endpoint[g.endpoint or "?"] += 1
            tokens += g.usage.completion_tokens or 0

        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as ex:
            list(ex.map(one, items))
        wall = time.perf_counter() - t0
        batch = gw.batch_stats()["mean_batch_size"]
    finally:
        gw.close()
    return RunResult("", len(items), wall, errors, tokens, by_endpoint, batch, done_at, last_start,
                     cpu_s=process_cpu_s() - cpu0)  # fmt: skip


def drive_async(
    urls: Sequence[str], items: Sequence[Item], concurrency: int, settings: dict[str, object]
) -> RunResult:
    """The gateway alone, fed without threads: ``Gateway.submit_many`` from one thread, at
    most ``concurrency`` requests outstanding (as the in-process runner feeds it)."""
    cpu0 = process_cpu_s()
    gw = open_gateway(Settings(llm_endpoints=",".join(urls), **settings))  # type: ignore[arg-type]
    by_endpoint: Counter[str] = Counter()
    errors = tokens = 0
    done_at: list[float] = []
    slots = threading.Semaphore(concurrency)
    try:
        t0 = time.perf_counter()

        def done(future: Future[Generation]) -> None:
            nonlocal errors, tokens
            done_at.append(time.perf_counter() - t0)
            slots.release()
            try:
                g = future.result()
            except ServiceError:
                errors += 1
                return
            by_endpoint[g.endpoint or "?"] += 1
            tokens += g.usage.completion_tokens or 0

        futures: list[Future[Generation]] = []
        pending = list(items)
        while pending:
            # Wait for one free slot, take every other free one, hand them over in one call.
            slots.acquire()
            take = 1
            while take < len(pending) and slots.acquire(blocking=False):
                take += 1
            batch, pending = pending[:take], pending[take:]
            for future in gw.submit_many(batch):
                future.add_done_callback(done)
                futures.append(future)
        last_start = time.perf_counter() - t0
        wait(futures)
        wall = time.perf_counter() - t0
    finally:
        gw.close()
    return RunResult("", len(items), wall, errors, tokens, by_endpoint, 0.0, done_at, last_start,
                     cpu_s=process_cpu_s() - cpu0)  # fmt: skip


# The table's workloads: ``general``, the 152 questions of general.jsonl with n samples each
# (1,976 = 152 x 1 x 13: the samples of a question share its search), and ``distinct``,
# the 2,000 independent questions (tuning and held-out halves), one job each.
WORKLOADS = {
    "general": ("general.jsonl",),
    "distinct": ("independent_tune.jsonl", "independent_heldout.jsonl"),
}
QUESTIONS = Path(__file__).resolve().parents[1] / "questions"
_WORKLOAD = ["general"]  # the one the eager and farm drivers sweep (print_table sets it)


def real_questions(n_jobs: int, modes: Sequence[Mode]) -> tuple[QuestionSet, int]:
    """Questions of the current workload (``WORKLOADS``) and ``n`` so that questions x modes
    x n is ``n_jobs`` or a few more (1,976 = 152 x 1 x 13: the table's quote prompts)."""
    files = [QUESTIONS / name for name in WORKLOADS[_WORKLOAD[0]]]
    sets = [QuestionSet.from_file(f) for f in files]
    every = sets[0] if len(sets) == 1 else QuestionSet.from_texts(
        [q for qs in sets for q in qs.questions], source="+".join(WORKLOADS[_WORKLOAD[0]]))
    n = -(-n_jobs // (len(every.questions) * len(modes)))
    count = -(-n_jobs // (len(modes) * n))
    return replace(every, questions=every.questions[:count]), n


def drive_eager(
    urls: Sequence[str], items: Sequence[Item], concurrency: int, settings: dict[str, object]
) -> RunResult:
    """``run_sweep(..., eager=True)``: the whole in-process run (retrieval, the LLM calls,
    verification, rows.jsonl, summary.md) on as many real quote-mode jobs as ``items``;
    ``wall_s`` is the run API call, from opening the index to the summary. The runner
    sizes its own concurrency (the endpoints' in-flight caps); 1 means ``serial``.

    Each run is made in a process of its own (spawned, its imports done before the
    clock starts), as each ``qfarm sweep --eager`` command is: a run in this process
    would find the modules an earlier run imported lazily (the runner, the plotting
    library) and the classifications it memoised (every question of the workload)
    already there, and print a CPU and a start-up that no command has."""
    temperature = items[0][1].temperature if items else None
    with fresh_process() as pool:
        return pool.submit(_drive_eager_here, list(urls), len(items), temperature, concurrency,
                           dict(settings), _WORKLOAD[0], table_index()).result()  # fmt: skip


def fresh_process() -> ProcessPoolExecutor:
    """One spawned process for one run: it starts with none of this process's imports
    and memoised work, as a command does."""
    import multiprocessing

    return ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))


def quote_sweep(workload: str, jobs: int, temperature: float | None) -> SweepSpec:
    """The eager and farm rows' sweep: ``jobs`` quote-mode jobs of ``workload``'s real
    questions, the result cache off."""
    _WORKLOAD[0] = workload
    questions, n = real_questions(jobs, [Mode.QUOTE])
    policy = Policy(temperature=temperature) if temperature is not None else Policy()
    return SweepSpec(questions=questions, modes=[Mode.QUOTE], n=n, policy=policy, use_cache=False)


def _drive_eager_here(urls: list[str], jobs: int, temperature: float | None, concurrency: int,
                      settings: dict[str, object], workload: str, index: Path) -> RunResult:  # fmt: skip
    """``drive_eager``'s run, in the process that calls it."""
    from qfarm.producer import run_sweep

    tmp = Path(tempfile.mkdtemp(prefix="qfarm-sat-eager-"))
    spec = quote_sweep(workload, jobs, temperature)
    opts: dict[str, Any] = {"llm_endpoints": ",".join(urls), "index_path": index,
                            "results_dir": tmp / "results", **settings}  # fmt: skip
    run_settings = Settings(**opts)
    cpu0, t0, started = process_cpu_s(children=True), time.perf_counter(), time.time()
    # Concurrency 1 is the main run's "one job at a time" baseline: the serial eager path.
    result = run_sweep(spec, eager=True, serial=concurrency == 1, settings=run_settings)
    wall, cpu = time.perf_counter() - t0, process_cpu_s(children=True) - cpu0
    rows = result.rows()
    ok = [r for r in rows if not r.error]
    by_endpoint: Counter[str] = Counter(r.endpoint or "?" for r in ok)
    tokens = sum(r.usage.completion_tokens or 0 for r in ok)
    return RunResult("", len(rows), wall, len(rows) - len(ok), tokens, by_endpoint, cpu_s=cpu,
                     started_epoch=started)  # fmt: skip


def drive_farm(
    urls: Sequence[str], items: Sequence[Item], concurrency: int, settings: dict[str, object]
) -> RunResult:
    """The distributed farm: Redis, a prefork worker for retrieve/verify, a threads worker
    for generate. ``qfarm sweep`` sends bundles, and a bundle holds its thread until its
    slowest answer, so the worker gets ``-c`` = 2 × concurrency ÷ bundle size (the
    README's sizing rule) and the gateway caps what is in flight per endpoint. As many
    real quote-mode jobs as ``items`` through real retrieval and verification; ``cpu_s``
    is every worker process's CPU plus the following process's. The sweep is submitted and
    followed from a process of its own (spawned, as ``drive_eager``'s runs are): a
    ``qfarm sweep`` command's first run, whatever an earlier row left in this one."""
    from bench.perf.farmkit import farm_env, flush, workers

    tmp = Path(tempfile.mkdtemp(prefix="qfarm-sat-"))
    index = table_index()
    # Greedy items ask for temperature 0, the only setting at which prompts can share a batch.
    temperature = items[0][1].temperature if items else None
    client = flush()
    env = farm_env(QFARM_LLM_ENDPOINTS=",".join(urls), QFARM_INDEX_PATH=str(index),
                   **{f"QFARM_{k.upper()}": str(v) for k, v in settings.items()})
    bundle = min(Settings().bundle_size, concurrency)
    threads = 1 if concurrency == 1 else -(-2 * concurrency // bundle)  # serial: one at a time
    env["QFARM_BUNDLE_SIZE"] = str(bundle)
    spec = [("sat-cpu", "retrieve,verify", "prefork", 2),
            ("sat-gpu", "generate", "threads", threads)]
    print(f"farm: generate worker -P threads -c {spec[1][3]}, bundles of {bundle} jobs", flush=True)
    with workers(env, spec, tmp) as procs, fresh_process() as follower:
        groups = [p.pid for p in procs]  # each worker leads its own session (and children)
        cpu0 = group_cpu_s(groups)
        rows, wall, follower_cpu = follower.submit(
            _follow_farm_here, list(urls), len(items), temperature, _WORKLOAD[0], index, bundle,
            tmp / "results").result()  # fmt: skip
        cpu = group_cpu_s(groups) - cpu0 + follower_cpu
    client.flushdb()
    ok = [r for r in rows if not r["error"]]
    by_endpoint: Counter[str] = Counter(r["endpoint"] or "?" for r in ok)
    tokens = sum(r["usage"]["completion_tokens"] or 0 for r in ok)
    return RunResult("", len(rows), wall, len(rows) - len(ok), tokens, by_endpoint, cpu_s=cpu)


def _follow_farm_here(urls: list[str], jobs: int, temperature: float | None, workload: str,
                      index: Path, bundle: int, results: Path) -> tuple[list[dict[str, Any]], float, float]:  # fmt: skip
    """``drive_farm``'s sweep, submitted and followed from the process that calls it: its
    rows, the seconds from the first enqueue to the last row, and this process's CPU."""
    from bench.perf.farmkit import bench_redis_url, sweep_on_farm

    spec = quote_sweep(workload, jobs, temperature)
    cpu0 = process_cpu_s()
    rows, wall = sweep_on_farm(
        spec,
        Settings(redis_url=bench_redis_url(), llm_endpoints=",".join(urls), index_path=index,
                 results_dir=results, bundle_size=bundle),
    )
    return rows, wall, process_cpu_s() - cpu0


# --------------------------------------------------------------------------- CPU and the index


def process_cpu_s(*, children: bool = False) -> float:
    """User + system CPU seconds of this process (every thread), so far; with ``children``,
    also those of its children that have ended and been waited for (an eager run's search
    process, stopped and joined as the run ends)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime
    if children:
        done = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu += done.ru_utime + done.ru_stime
    return cpu


def _stat(pid: int | str) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state is [0]), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cpu_ticks(fields: list[str]) -> int:
    return int(fields[11]) + int(fields[12])  # utime, stime (the 14th and 15th fields)


def group_cpu_s(pgids: Sequence[int]) -> float:
    """CPU seconds of every live process in these process groups, read from /proc."""
    ticks = 0
    for entry in os.listdir("/proc"):
        fields = _stat(entry) if entry.isdigit() else None
        if fields is not None and int(fields[2]) in pgids:  # [2]: the process group
            ticks += _cpu_ticks(fields)
    return ticks / os.sysconf("SC_CLK_TCK")


def pid_cpu_s(pids: Sequence[int]) -> float:
    """CPU seconds of these processes (not their children), read from /proc."""
    ticks = sum(_cpu_ticks(f) for f in map(_stat, pids) if f is not None)
    return ticks / os.sysconf("SC_CLK_TCK")


_INDEX: list[Path] = []


def table_index() -> Path:
    """The embedded index of the default corpus, built once per benchmark process."""
    if not _INDEX:
        from qfarm.worker.retrieval import ensure_default_index

        data = Path(os.environ.get("QFARM_DATA_DIR") or tempfile.mkdtemp(prefix="qfarm-sat-data-"))
        _INDEX.append(ensure_default_index(Settings(data_dir=data), progress=False))
    return _INDEX[0]


DRIVERS: dict[str, Driver] = {
    "thread-pool": drive_thread_pool,
    "async": drive_async,
    "eager": drive_eager,
    "farm": drive_farm,
}


# --------------------------------------------------------------------------- figures


def ideal_rps(specs: Sequence[EndpointSpec], mean_output_tokens: float) -> float:
    """Σ capacity ÷ the simulator's exact mean slot time: TTFT + (tokens − 1) × tpot."""
    return sum(s.max_num_seqs / s.latency.mean_service_s(mean_output_tokens) for s in specs)


def ideal_rps_issue_formula(specs: Sequence[EndpointSpec], mean_output_tokens: float) -> float:
    """The looser ideal, TTFT + tokens × tpot: one token-time longer, so a lower ideal."""
    return sum(s.max_num_seqs / s.latency.mean_service_s(mean_output_tokens + 1) for s in specs)


def report(result: RunResult, specs: Sequence[EndpointSpec], urls: Sequence[str]) -> float:
    ideal = ideal_rps(specs, result.mean_output_tokens)
    ratio = result.rps / ideal
    shares = " ".join(
        f"{chr(65 + i)}={result.by_endpoint[u] / max(result.n_jobs - result.errors, 1):.2f}"
        for i, u in enumerate(urls)
    )
    batch = f" mean_batch={result.mean_batch_size:.2f}" if result.mean_batch_size else ""
    print(
        f"{result.label}: jobs={result.n_jobs} errors={result.errors} wall={result.wall_s:.2f}s "
        f"achieved={result.rps:.1f} req/s mean_output_tokens={result.mean_output_tokens:.1f} "
        f"ideal={ideal:.1f} req/s ratio={ratio:.3f} "
        f"steady_ratio={result.steady_rps() / ideal:.3f} share {shares}{batch}",
        flush=True,
    )
    return ratio


def run(driver: Driver, urls: Sequence[str], items: Sequence[Item], conc: int, label: str,
        **settings: object) -> RunResult:  # fmt: skip
    base: dict[str, object] = {"llm_health_interval_s": 1.0, "llm_timeout_s": 60.0}
    result = driver(urls, items, conc, {**base, **settings})
    result.label = label
    return result


# --------------------------------------------------------------------------- the saturation table

# The table's endpoints: 64 slots, a fixed 250 ms per request, so 256 requests/s each.
TABLE_ENDPOINT = EndpointSpec(64, LatencyModel(ttft_ms=(250.0, 250.0), tpot_ms=(0.0, 0.0)))
TABLE_ROWS = [  # (client, driver, endpoints)
    ("qfarm --eager", "eager", 1),
    ("qfarm --eager", "eager", 2),
    ("qfarm distributed", "farm", 1),
    ("qfarm distributed", "farm", 2),
    ("gateway alone, thread pool", "thread-pool", 1),
    ("gateway alone, thread pool", "thread-pool", 2),
    ("gateway alone, direct async", "async", 1),
    ("gateway alone, direct async", "async", 2),
]


@dataclass
class Measured:
    flow: float  # achieved / ideal from the first request's arrival to the last one's
    whole: float  # achieved / ideal over the driver's whole wall
    cpu_ms: float  # client CPU per request, ms (= s per 1k requests)
    requests: int
    errors: int
    before_s: float  # from the driver's start to the first request (eager: index, probes)
    after_s: float  # from the last answer to the driver's end (eager: rows, summary.md)
    sim_cpu_ms: float  # the simulators' own CPU per request: what the client competes with
    node_cpu_ms: float = 0.0  # the search node's JVM per request (in cpu_ms too), OpenSearch rows


class RequestLog:
    """The simulators' request logs, read run by run."""

    def __init__(self, sims: Sequence[SimulatorHandle]):
        self._sims = sims
        self._since = [0] * len(sims)
        self.take(len(sims))

    def take(self, count: int) -> list[dict[str, Any]]:
        """Completion requests to the first ``count`` simulators since the last call."""
        out: list[dict[str, Any]] = []
        for i, sim in enumerate(self._sims):
            entries = sim.stats(self._since[i])["requests"]
            if entries:
                self._since[i] = max(e["id"] for e in entries)
            if i < count:
                out += [e for e in entries if "completions" in e["path"]]
        return out


def flow_ratio(entries: Sequence[dict[str, Any]], ideal: float) -> float:
    """Answers completed between the first and the last request's arrival, per second of
    that window, ÷ ideal: the rate while requests flow, without the final drain."""
    if len(entries) < 2:
        return 0.0
    first = min(e["t_arrival"] for e in entries)
    last = max(e["t_arrival"] for e in entries)
    done = sum(1 for e in entries if e["status"] == 200 and (e.get("t_done") or 0) <= last)
    return done / (last - first) / ideal if last > first else 0.0


def measure(driver: str, sims: Sequence[SimulatorHandle], log: RequestLog, jobs: int,
            backend: dict[str, object] | None = None, node_pids: Sequence[int] = ()) -> Measured:  # fmt: skip
    """One run of a table row. ``backend``: retrieval settings for the eager and farm
    drivers (the OpenSearch rows: ``retriever``, ``es_url``); ``node_pids``: processes
    whose CPU counts as the client's (the search node's JVM)."""
    urls = [s.url for s in sims]
    cap = TABLE_ENDPOINT.max_num_seqs * len(urls)
    # Thread pool and direct async: twice the slots, so the gateway always holds a queue (as
    # the generate worker's -c rule and the in-process runner do); eager and farm size
    # themselves.
    conc = 2 * cap
    items = make_items(jobs, greedy=False)
    sim_cpu0, node_cpu0 = pid_cpu_s([s.pid for s in sims]), pid_cpu_s(node_pids)
    result = run(DRIVERS[driver], urls, items, conc, driver, **(backend or {}))
    sim_cpu = pid_cpu_s([s.pid for s in sims]) - sim_cpu0
    node_cpu = pid_cpu_s(node_pids) - node_cpu0
    entries = log.take(len(urls))
    ideal = ideal_rps([TABLE_ENDPOINT] * len(urls), 1.0)  # tpot 0: the slot time is 250 ms
    requests = max(len(entries), 1)
    first = min((e["t_arrival"] for e in entries), default=0.0)
    last = max((e.get("t_done") or 0.0 for e in entries), default=0.0)
    before = first - result.started_epoch if result.started_epoch else 0.0
    after = result.started_epoch + result.wall_s - last if result.started_epoch else 0.0
    return Measured(
        flow=flow_ratio(entries, ideal),
        whole=result.n_jobs / result.wall_s / ideal,
        cpu_ms=(result.cpu_s + node_cpu) * 1000.0 / requests,
        requests=len(entries),
        errors=result.errors,
        before_s=before,
        after_s=after,
        sim_cpu_ms=sim_cpu * 1000.0 / requests,
        node_cpu_ms=node_cpu * 1000.0 / requests,
    )


def span(values: Sequence[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{lo:{fmt}}–{hi:{fmt}}"


BACKENDS = ("embedded", "opensearch")


def start_opensearch(stack: ExitStack) -> tuple[dict[str, object], list[int]]:
    """A real OpenSearch node for the table's OpenSearch rows, filled from the default
    corpus before any timing: the retrieval settings that point a sweep at it, and its
    JVM's pid (its CPU counts as the client's)."""
    from qfarm.ops.search.launch import start_search_node
    from qfarm.worker.retrieval import open_retriever
    from qfarm.worker.retrieval.ingest import CorpusSource, build_cluster_index

    node = stack.enter_context(start_search_node())
    backend: dict[str, object] = {"retriever": "opensearch", "es_url": node.url}
    retriever = open_retriever(Settings(**backend))  # type: ignore[arg-type]
    try:
        report = build_cluster_index(retriever, CorpusSource.resolve("default"), progress=False)
        # Warm the JVM (it compiles its hot paths over the first few hundred searches) on
        # the tuning half; a search with hits is not cached, so nothing is answered ahead.
        for q in QuestionSet.from_file(QUESTIONS / WORKLOADS["distinct"][0]).questions:
            retriever.search(q.text, top_k=Policy().top_k, title_boost=Policy().title_boost)
    finally:
        retriever.close()
    print(f"search node: {node.description}, {report.passages:,} passages indexed; its JVM's "
          "CPU is counted in the OpenSearch rows' client CPU", flush=True)  # fmt: skip
    return backend, [node.pid]


def print_table(jobs: int, repeat: int, only: Sequence[str] = (),
                workloads: Sequence[str] = ("general",),
                backends: Sequence[str] = ("embedded",)) -> None:  # fmt: skip
    """Every row of the saturation table for qfarm, ``repeat`` times each, per workload
    (``WORKLOADS``; the gateway-alone rows send synthetic prompts, so only once) and per
    retrieval backend (``BACKENDS``; OpenSearch for the eager rows only, its node on this
    machine; runs alternate between backends); ranges printed."""
    from bench.perf.farmkit import exit_on_sigterm

    exit_on_sigterm()
    rows = [r for r in TABLE_ROWS if not only or r[1] in only]
    lat = TABLE_ENDPOINT.latency
    print(f"load before: {os.getloadavg()[0]:.2f} (1-min load average, {os.cpu_count()} cores)")
    table_index()  # built before any timing
    results: dict[tuple[str, str, str, int], list[Measured]] = {}
    runs = [(w, row, b) for w in workloads for row in rows for b in backends
            if (row[1] == "eager" or b == "embedded")  # OpenSearch: the eager rows
            and (row[1] in ("eager", "farm") or (w == workloads[0] and b == backends[0]))]
    with ExitStack() as stack:
        search: dict[str, tuple[dict[str, object], list[int]]] = {"embedded": ({}, [])}
        if "opensearch" in backends:
            search["opensearch"] = start_opensearch(stack)
        sims = [
            stack.enter_context(start_simulator(max_num_seqs=TABLE_ENDPOINT.max_num_seqs,
                                                ttft_ms=lat.ttft_ms, tpot_ms=lat.tpot_ms))
            for _ in range(2)
        ]  # fmt: skip
        print(f"endpoints: 2 vLLM SIMULATORS, max_num_seqs={TABLE_ENDPOINT.max_num_seqs}, "
              f"{lat.ttft_ms[0]:g} ms per request (ideal 256 requests/s each); {jobs} jobs a run",
              flush=True)  # fmt: skip
        log = RequestLog(sims)
        for attempt in range(repeat):
            for workload, (client, driver, n_eps), backend in runs:
                _WORKLOAD[0] = workload
                retrieval = driver in ("eager", "farm")
                if retrieval and backend != "embedded":
                    client = f"{client}, {backend}"
                m = measure(driver, sims[:n_eps], log, jobs, *search[backend])
                shown = workload if retrieval else "synthetic"
                results.setdefault((client, shown, driver, n_eps), []).append(m)
                node = f" (search node {m.node_cpu_ms:.2f})" if backend != "embedded" else ""
                print(f"run {attempt + 1}: {client}, {shown}, {n_eps} endpoint(s): flow={m.flow:.3f} "
                      f"whole={m.whole:.3f} cpu={m.cpu_ms:.2f}{node} ms/request "
                      f"sim_cpu={m.sim_cpu_ms:.2f} ms/request "
                      f"requests={m.requests} errors={m.errors} load={os.getloadavg()[0]:.2f}"
                      + (f" before_first_request={m.before_s:.2f}s after_last_answer="
                         f"{m.after_s:.2f}s" if driver == "eager" else ""),
                      flush=True)  # fmt: skip
    print()
    print("| client | workload | endpoints | achieved / ideal while requests flow | whole command | "
          "client CPU per request | simulator CPU per request |")
    print("|---|---|---|---|---|---|---|")
    for (client, workload, _driver, n_eps), ms in results.items():
        node = (f" (search node {span([m.node_cpu_ms for m in ms], '.2f')} ms)"
                if any(m.node_cpu_ms for m in ms) else "")  # fmt: skip
        print(f"| {client} | {workload} | {n_eps} | {span([m.flow for m in ms], '.2f')} | "
              f"{span([m.whole for m in ms], '.2f')} | {span([m.cpu_ms for m in ms], '.2f')} ms{node} | "
              f"{span([m.sim_cpu_ms for m in ms], '.2f')} ms |")
    print(f"\n{repeat} run(s) each, ranges min–max; {jobs} jobs a run; {os.cpu_count()} cores, "
          f"load after: {os.getloadavg()[0]:.2f}. All figures come from the vLLM simulator (SIMULATED).")


# The response cache's rows: one prefix-aware simulator (--latency cost: what a run is
# charged in model seconds), general x 13 quote-mode jobs, eager, three runs in a row.
CACHE_DRIVER = "eager-cache"
CACHE_RUNS = (("no cache", False), ("--cache, first run (fills it)", True),
              ("--cache, second run", True))  # fmt: skip


@dataclass(frozen=True)
class CacheRun:
    label: str
    jobs: int
    errors: int
    requests: int  # sequences the simulator ran (one per model request: n is 1)
    busy_s: float  # model seconds the simulator charged (SIMULATED)
    request_s: float  # the cost table's model s: the requests' durations, summed
    wall_s: float
    hits: int
    saved_s: float  # model time the hits' replies first took, as the rows say


def response_cache_runs(jobs: int, time_scale: float = 1.0) -> list[CacheRun]:
    """general x 13 eager, without the response cache, then twice with ``--cache``: what
    each run asked of the model and what it was charged. The result cache is off (each
    run would otherwise re-issue the first's rows and never reach the model)."""
    from qfarm.producer import SweepSpec, run_sweep
    from qfarm.worker.llm import process_response_cache

    _WORKLOAD[0] = "general"
    questions, n = real_questions(jobs, [Mode.QUOTE])
    process_response_cache().clear()
    out = []
    with start_simulator(latency="cost", time_scale=time_scale) as sim:
        for label, cache in CACHE_RUNS:
            sim.reset()  # each run starts with an empty prefix cache, as a fresh server would
            before = sim.stats()["charged"]
            tmp = Path(tempfile.mkdtemp(prefix="qfarm-sat-cache-"))
            settings = Settings(llm_endpoints=sim.url, index_path=table_index(),
                                results_dir=tmp / "results")  # fmt: skip
            spec = SweepSpec(questions=questions, modes=[Mode.QUOTE], n=n, use_cache=False,
                             response_cache=cache)  # fmt: skip
            t0 = time.perf_counter()
            result = run_sweep(spec, eager=True, settings=settings)
            wall = time.perf_counter() - t0
            after = sim.stats()["charged"]
            rows = result.rows()
            hits = [r for r in rows if r.response_cache_hit]
            asked = [r.llm_request for r in rows if r.llm_request is not None]
            out.append(CacheRun(
                label, len(rows), sum(1 for r in rows if r.error),
                int(after["sequences"] - before["sequences"]), after["busy_s"] - before["busy_s"],
                sum(q.ms / q.prompts for q in asked) / 1000.0,
                wall, len(hits), sum(r.model_ms_saved or 0.0 for r in hits) / 1000.0))  # fmt: skip
            print(f"{label}: {out[-1]}", flush=True)
    process_response_cache().clear()
    return out


def print_cache_table(runs: Sequence[CacheRun], time_scale: float) -> None:
    print("\nThe response cache: general x 13 quote-mode jobs, eager, one simulated endpoint "
          f"(--latency cost, time scale {time_scale:g}); every figure SIMULATED\n")
    print("| run | rows | errors | model requests | engine s charged | request s (cost table) | "
          "replies from the cache | request s saved (rows) | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        print(f"| {r.label} | {r.jobs} | {r.errors} | {r.requests} | {r.busy_s:.2f} | "
              f"{r.request_s:.1f} | {r.hits} | {r.saved_s:.1f} | {r.wall_s:.1f} |")
    print("\nengine s: the simulator's busy time (its steps); request s: the requests' durations "
          "summed, queueing at the server included (the cost table's model s), which is what "
          "a hit's model_ms_saved repeats.")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=2000, help="jobs in the main run (default 2000)")
    p.add_argument("--compare-jobs", type=int, default=600, help="jobs per batched/unbatched run")
    p.add_argument("--serial-jobs", type=int, default=12, help="jobs timed one at a time")
    p.add_argument("--capacity", default="32,16", help="max_num_seqs of the two endpoints")
    p.add_argument("--concurrency", type=int, default=0, help="driver threads (0: 2 × Σ capacity)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--batch-wait-ms", type=float, default=5.0)
    p.add_argument("--driver", choices=sorted(DRIVERS), default="thread-pool")
    p.add_argument("--quick", action="store_true",
                   help="seconds, figures meaningless: 100 jobs, 60 per comparison, 4 serial (CI)")
    p.add_argument("--table", action="store_true",
                   help="the saturation table: eager, distributed, gateway alone at 1 and 2 endpoints")
    p.add_argument("--table-jobs", type=int, default=1976, help="jobs per table run (default 1976)")
    p.add_argument("--repeat", type=int, default=2, help="runs per table row (default 2)")
    p.add_argument("--only", default="",
                   help=f"table: only these drivers (comma list; {CACHE_DRIVER}: the response "
                        "cache's rows)")
    p.add_argument("--cache-time-scale", type=float, default=1.0,
                   help="table: the cost simulator's time scale for the response cache's rows "
                        "(its sleeps x this; the model seconds charged are unchanged)")
    p.add_argument("--backends", default="embedded",
                   help="table: retrieval backends of the eager rows (comma list of "
                        f"{', '.join(BACKENDS)}; default embedded; opensearch starts a real node, "
                        "Java 17+ and Maven, and counts its JVM's CPU)")
    p.add_argument("--workloads", default="general,distinct",
                   help="table: question workloads of the eager and farm rows (comma list of "
                        f"{', '.join(WORKLOADS)}; default both)")
    args = p.parse_args(argv)
    if args.table:
        workloads = [w for w in args.workloads.split(",") if w]
        unknown = [w for w in workloads if w not in WORKLOADS]
        if unknown or not workloads:
            p.error(f"--workloads {args.workloads}: expected a comma list of {', '.join(WORKLOADS)}")
        backends = [b for b in args.backends.split(",") if b]
        if not backends or any(b not in BACKENDS for b in backends):
            p.error(f"--backends {args.backends}: expected a comma list of {', '.join(BACKENDS)}")
        if args.quick:  # CI: one short run of the eager row per workload, figures meaningless
            args.table_jobs, args.repeat, args.only = 40, 1, args.only or "eager"
        only = [d for d in args.only.split(",") if d]
        drivers = [d for d in only if d != CACHE_DRIVER]
        if drivers or not only:
            print_table(args.table_jobs, args.repeat, drivers, workloads, backends)
        if CACHE_DRIVER in only or not only:
            print_cache_table(response_cache_runs(args.table_jobs, args.cache_time_scale),
                              args.cache_time_scale)
        return
    from bench.perf.farmkit import exit_on_sigterm

    exit_on_sigterm()
    if args.quick:
        args.jobs, args.compare_jobs, args.serial_jobs = 100, 60, 4
    specs = [EndpointSpec(int(c)) for c in args.capacity.split(",")]
    conc = args.concurrency or 2 * sum(s.max_num_seqs for s in specs)
    driver = DRIVERS[args.driver]

    with ExitStack() as stack:
        sims: list[SimulatorHandle] = [
            stack.enter_context(
                start_simulator(
                    max_num_seqs=s.max_num_seqs,
                    ttft_ms=s.latency.ttft_ms,
                    tpot_ms=s.latency.tpot_ms,
                )
            )  # fmt: skip
            for s in specs
        ]
        urls = [s.url for s in sims]
        for i, (sim, spec) in enumerate(zip(sims, specs, strict=True)):
            lat = spec.latency
            print(f"endpoint {chr(65 + i)}: {sim.url} (vLLM SIMULATOR) max_num_seqs={spec.max_num_seqs} "
                  f"ttft={lat.ttft_ms[0]:g}-{lat.ttft_ms[1]:g} ms tpot={lat.tpot_ms[0]:g}-{lat.tpot_ms[1]:g} ms")  # fmt: skip
        print(f"driver={args.driver} concurrency={conc}", flush=True)

        main_run = run(
            driver, urls, make_items(args.jobs, greedy=False), conc, "unbatched (default)"
        )
        ratio = report(main_run, specs, urls)
        loose = main_run.rps / ideal_rps_issue_formula(specs, main_run.mean_output_tokens)
        print(f"  (with the looser TTFT + tokens x tpot ideal the ratio would read {loose:.3f}; "
              "steady_ratio leaves out the final drain, when fewer jobs remain than slots)")  # fmt: skip

        serial = run(
            driver, urls[:1], make_items(args.serial_jobs, greedy=False, seed=11), 1, "serial"
        )
        print(f"serial (one job at a time, endpoint A): jobs={serial.n_jobs} wall={serial.wall_s:.2f}s "
              f"achieved={serial.rps:.2f} req/s; speed-up x{main_run.rps / serial.rps:.1f}", flush=True)  # fmt: skip

        greedy = make_items(args.compare_jobs, greedy=True, seed=13)
        unbatched = run(driver, urls, greedy, conc, "greedy unbatched")
        r_unbatched = report(unbatched, specs, urls)
        batched = run(driver, urls, greedy, conc, f"greedy batched B={args.batch_size}",
                      llm_batch_size=args.batch_size, llm_batch_wait_ms=args.batch_wait_ms)  # fmt: skip
        r_batched = report(batched, specs, urls)
        print(f"batched/unbatched throughput: {batched.rps / unbatched.rps:.3f} "
              f"(ratios {r_batched:.3f} vs {r_unbatched:.3f}); "
              f"default stays {'batched' if r_batched > r_unbatched * 1.02 else 'unbatched'}")  # fmt: skip
    print("all figures come from the vLLM simulator")
    print(f"saturation_ratio={ratio:.3f}")


if __name__ == "__main__":
    main()
