"""Peers on the same prompts: lm-evaluation-harness and inspect_ai against one simulated endpoint.

Optional: neither peer is a qfarm dependency. Each one installed (``pip install -e '.[peers]'``,
or ``pip install lm-eval inspect-ai``) is run on the prompts qfarm sends for the
distinct-question workload (``bench.perf.saturation``'s ``distinct``: quote mode, one job per
question, the evidence retrieved and the prompt rendered by qfarm), against a vLLM simulator
with the saturation table's endpoint (64 slots, 250 ms a request). Beside them, the ceiling:
a bare asyncio client (aiohttp, a few lines, no retries, no records) sending the same prompts
with the same sampling, 64 at a time. Every client posts the raw prompt to
``/v1/completions`` (lm-eval's ``local-completions``, inspect_ai's ``openai-api-completions``):
the prompt is already ChatML, and a chat endpoint would wrap it again.

Printed per client: requests counted at the simulator, its flow ratio (achieved / ideal while
requests flow), the whole command's wall and ratio, and the CPU per request of the client's
process tree (each client runs as its own command, the ceiling too). A peer that is not
installed is named and skipped. Exit status 1 when a client that ran failed or did not get
every prompt answered, so the quick mode in the tests catches a peer that stops working.

    python -m bench.perf.peers [--jobs 2000] [--quick]

Figures come from the vLLM simulator (SIMULATED); nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from qfarm.common.settings import DEFAULT_MODEL

REPO = Path(__file__).resolve().parents[2]
PEERS = {"lm-eval": "lm_eval", "inspect_ai": "inspect_ai"}
BARE = "bare asyncio client"
# The simulator is started serving this name and every client asks for it: the model the
# prompts are rendered for (its profile), and the name a vLLM server of the farm serves.
MODEL = DEFAULT_MODEL
# What every client asks for, so the requests differ only in how they are sent.
MAX_TOKENS = 256
TEMPERATURE = 0.7
STOP = "<|im_end|>"

Command = tuple[list[str], dict[str, str]]  # argv, environment variables added


def prompts(jobs: int) -> list[str]:
    """qfarm's quote-mode prompts for the first ``jobs`` distinct questions."""
    from bench.perf import saturation
    from qfarm.common.grounding.preflight import run_preflight
    from qfarm.common.grounding.prompts import build_prompt
    from qfarm.common.models import Mode
    from qfarm.common.policy import Policy
    from qfarm.common.profiles import profile_id_for_model
    from qfarm.worker.retrieval.embedded import EmbeddedRetriever

    saturation._WORKLOAD[0] = "distinct"
    questions, _ = saturation.real_questions(jobs, [Mode.QUOTE])
    retriever = EmbeddedRetriever(saturation.table_index())
    policy = Policy()
    profile = profile_id_for_model(MODEL)
    out = []
    for q in questions.questions[:jobs]:
        hits = retriever.search(q.text, top_k=policy.top_k, title_boost=policy.title_boost)
        pre = run_preflight(q.text, Mode.QUOTE, policy, profile)
        out.append(build_prompt(q.text, Mode.QUOTE, hits, policy, pre).text)
    retriever.close()
    return out


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def lm_eval_command(work: Path, url: str, data: Path, concurrency: int) -> Command:
    """lm-eval's custom task over ``data`` (one prompt a line), generate_until, no tokenizer."""
    task = work / "tasks"
    task.mkdir()
    (task / "qfarm_prompts.yaml").write_text(
        textwrap.dedent(f"""\
        task: qfarm_prompts
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {data}
        test_split: test
        output_type: generate_until
        doc_to_text: "{{{{prompt}}}}"
        doc_to_target: ""
        generation_kwargs:
          until: ["{STOP}"]
          max_gen_toks: {MAX_TOKENS}
          temperature: {TEMPERATURE}
        metric_list:
          - metric: exact_match
        """)
    )
    args = (
        f"model={MODEL},base_url={url}/v1/completions,tokenizer_backend=none,"
        f"tokenized_requests=False,num_concurrent={concurrency},max_retries=1"
    )
    exe = shutil.which("lm_eval") or shutil.which("lm-eval")
    cli = [exe] if exe else [sys.executable, "-m", "lm_eval"]
    return [*cli, "--model", "local-completions", "--model_args", args, "--tasks", "qfarm_prompts",
            "--include_path", str(task), "--output_path", str(work / "out")], {}  # fmt: skip


def inspect_command(work: Path, url: str, data: Path, concurrency: int) -> Command:
    """inspect_ai's task over ``data``: one sample a prompt, ``generate()``, no scorer."""
    (work / "qfarm_prompts.py").write_text(
        textwrap.dedent(f"""\
        import json
        from inspect_ai import Task, task
        from inspect_ai.dataset import Sample
        from inspect_ai.solver import generate

        @task
        def qfarm_prompts():
            lines = open({str(data)!r}).read().splitlines()
            return Task(dataset=[Sample(input=json.loads(l)["prompt"]) for l in lines],
                        solver=generate())
        """)
    )
    exe = shutil.which("inspect")
    cli = [exe] if exe else [sys.executable, "-m", "inspect_ai"]
    # The task file relative to the command's working directory (``work``): inspect_ai globs
    # a task path under that directory, and an absolute pattern is refused there
    # ("Non-relative patterns are unsupported"). ``openai-api-completions/<service>/<model>``:
    # the raw completions endpoint, its URL and key from ``<SERVICE>_BASE_URL`` and
    # ``<SERVICE>_API_KEY``; that provider defaults to one token at temperature 0 (it is
    # meant for scoring), hence the explicit sampling.
    return [*cli, "eval", "qfarm_prompts.py", "--model", f"openai-api-completions/sim/{MODEL}",
            "--max-connections", str(concurrency), "--max-tokens", str(MAX_TOKENS),
            "--temperature", str(TEMPERATURE), "--stop-seqs", STOP, "--display", "none",
            "--log-dir", str(work / "logs")], {"SIM_BASE_URL": f"{url}/v1", "SIM_API_KEY": "none"}  # fmt: skip


def bare_command(work: Path, url: str, data: Path, concurrency: int) -> Command:
    """This module's own ``--bare-client``: the ceiling, a process of its own like the peers."""
    return [sys.executable, "-m", "bench.perf.peers", "--bare-client", url, str(data),
            str(concurrency)], {"PYTHONPATH": str(REPO)}  # fmt: skip


COMMANDS: dict[str, Callable[[Path, str, Path, int], Command]] = {
    BARE: bare_command, "lm-eval": lm_eval_command, "inspect_ai": inspect_command,
}  # fmt: skip


async def send_all(url: str, prompts: Sequence[str], concurrency: int) -> int:
    """Every prompt once, ``concurrency`` at a time, the peers' sampling; the failures.

    aiohttp, the library qfarm's gateway is built on: httpx's async pool spent several times
    its CPU a request here (docs/llm.md, 'What the gateway does'), so it would lower the
    ceiling rather than show it."""
    import aiohttp

    pending = iter(prompts)
    failed = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def lane() -> None:
            nonlocal failed
            for prompt in pending:  # one shared iterator: each prompt goes out once
                body = {"model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS,
                        "temperature": TEMPERATURE, "stop": [STOP]}  # fmt: skip
                async with session.post(f"{url}/v1/completions", json=body) as reply:
                    await reply.read()
                    failed += reply.status != 200

        await asyncio.gather(*(lane() for _ in range(concurrency)))
    return failed


def run_bare_client(url: str, data: Path, concurrency: int) -> int:
    lines = data.read_text().splitlines()
    failed = asyncio.run(send_all(url, [json.loads(line)["prompt"] for line in lines], concurrency))
    return 1 if failed else 0


@dataclass
class Outcome:
    client: str
    requests: int
    errors: int  # requests the simulator did not answer with 200
    flow: float
    whole: float
    wall_s: float
    cpu_ms: float  # CPU per request of the client's process tree


def print_table(outcomes: Sequence[Outcome], jobs: int, concurrency: int) -> None:
    print()
    print("| client | requests | errors | achieved / ideal while requests flow | whole command | "
          "wall s | client CPU per request |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for o in outcomes:
        print(f"| {o.client} | {o.requests} | {o.errors} | {o.flow:.3f} | {o.whole:.3f} | "
              f"{o.wall_s:.1f} | {o.cpu_ms:.2f} ms |")  # fmt: skip
    print(f"\n{jobs} prompts, {concurrency} at a time, one run each; {os.cpu_count()} cores, "
          f"load after: {os.getloadavg()[0]:.2f}. All figures come from the vLLM simulator "
          "(SIMULATED).")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2000, help="distinct questions, one prompt each")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="seconds, figures meaningless: 20 prompts (CI; skips peers not installed)",
    )
    ap.add_argument(
        "--bare-client", nargs=3, metavar=("URL", "PROMPTS", "CONCURRENCY"), help=argparse.SUPPRESS
    )  # the ceiling's own process (bare_command)
    args = ap.parse_args(argv)
    if args.bare_client:
        url, data, concurrency = args.bare_client
        return run_bare_client(url, Path(data), int(concurrency))
    if args.quick:
        args.jobs = 20
    installed = {name: importlib.util.find_spec(module) is not None
                 for name, module in PEERS.items()}  # fmt: skip
    for name, ok in installed.items():
        if not ok:
            print(f"{name}: not installed, skipped (pip install -e '.[peers]')")
    if not any(installed.values()):
        if args.quick:  # the prompts are still built, so a renamed function fails here
            print(f"{len(prompts(args.jobs))} prompts built")
        return 0

    from bench.perf.saturation import TABLE_ENDPOINT, RequestLog, flow_ratio, ideal_rps
    from qfarm.ops.sim.launch import start_simulator

    work = Path(tempfile.mkdtemp(prefix="qfarm-peers-"))
    data = work / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts(args.jobs)))
    lat = TABLE_ENDPOINT.latency
    concurrency = TABLE_ENDPOINT.max_num_seqs
    clients = [BARE, *(name for name, ok in installed.items() if ok)]
    outcomes: list[Outcome] = []
    failed: list[str] = []
    with start_simulator(model=MODEL, max_num_seqs=TABLE_ENDPOINT.max_num_seqs,
                         ttft_ms=lat.ttft_ms, tpot_ms=lat.tpot_ms) as sim:  # fmt: skip
        log = RequestLog([sim])
        ideal = ideal_rps([TABLE_ENDPOINT], 1.0)  # tpot 0: a slot is held 250 ms
        print(f"{args.jobs} prompts; endpoint: vLLM SIMULATOR serving {MODEL}, {concurrency} "
              f"slots, {lat.ttft_ms[0]:g} ms a request; {os.cpu_count()} cores")  # fmt: skip
        for name in clients:
            client_dir = work / name.replace(" ", "-")
            client_dir.mkdir()
            cmd, extra_env = COMMANDS[name](client_dir, sim.url, data, concurrency)
            cpu0, t0 = children_cpu_s(), time.perf_counter()
            done = subprocess.run(cmd, cwd=client_dir, env={**os.environ, **extra_env},
                                  capture_output=True, text=True)  # fmt: skip
            wall, cpu = time.perf_counter() - t0, children_cpu_s() - cpu0
            entries = log.take(1)
            errors = sum(1 for e in entries if e["status"] != 200)
            if done.returncode != 0:
                print(
                    f"{name}: exited {done.returncode}: {done.stdout[-600:]}{done.stderr[-1500:]}"
                )
                failed.append(name)
                continue
            if errors or len(entries) < args.jobs:
                failed.append(name)
            outcome = Outcome(name, len(entries), errors, flow_ratio(entries, ideal),
                              args.jobs / wall / ideal, wall, cpu * 1000 / max(len(entries), 1))  # fmt: skip
            outcomes.append(outcome)
            print(f"{name}: requests={outcome.requests} errors={errors} flow={outcome.flow:.3f} "
                  f"whole={outcome.whole:.3f} wall={wall:.1f}s "
                  f"cpu={outcome.cpu_ms:.2f} ms/request (SIMULATED)", flush=True)  # fmt: skip
    print_table(outcomes, args.jobs, concurrency)
    if failed:
        print(f"failed: {', '.join(failed)} (exited non-zero, an error at the simulator, or "
              f"fewer than {args.jobs} requests)")  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
