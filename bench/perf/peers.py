"""Peers on the same prompts: lm-evaluation-harness and inspect_ai against one simulated endpoint.

Optional: neither peer is a qfarm dependency. Each one installed (``pip install lm-eval``,
``pip install inspect-ai``) is run on the prompts qfarm sends for the distinct-question
workload (``bench.perf.saturation``'s ``distinct``: quote mode, one job per question,
the evidence retrieved and the prompt rendered by qfarm), against a vLLM simulator with
the saturation table's endpoint (64 slots, 250 ms a request). Printed per peer: requests
counted at the simulator, its flow ratio (achieved / ideal while requests flow), the whole
command's wall and the CPU per request of the peer's process tree. A peer that is not
installed is named and skipped; the script then exits 0.

    python -m bench.perf.peers [--jobs 2000] [--quick]

Figures come from the vLLM simulator (SIMULATED); nothing is asserted.
"""

from __future__ import annotations

import argparse
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
from pathlib import Path

PEERS = {"lm-eval": "lm_eval", "inspect_ai": "inspect_ai"}
MODEL = "qfarm-sim"


def prompts(jobs: int) -> list[str]:
    """qfarm's quote-mode prompts for the first ``jobs`` distinct questions."""
    from bench.perf import saturation
    from qfarm.common.grounding.preflight import run_preflight
    from qfarm.common.grounding.prompts import build_prompt
    from qfarm.common.models import Mode
    from qfarm.common.policy import Policy
    from qfarm.common.profiles import profile_id_for_model
    from qfarm.common.settings import Settings
    from qfarm.worker.retrieval.embedded import EmbeddedRetriever

    saturation._WORKLOAD[0] = "distinct"
    questions, _ = saturation.real_questions(jobs, [Mode.QUOTE])
    retriever = EmbeddedRetriever(saturation.table_index())
    policy = Policy()
    profile = profile_id_for_model(Settings().model)
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


def lm_eval_command(work: Path, url: str, data: Path, concurrency: int) -> list[str]:
    """lm-eval's custom task over ``data`` (one prompt a line), generate_until, no tokenizer."""
    task = work / "tasks"
    task.mkdir()
    (task / "qfarm_prompts.yaml").write_text(textwrap.dedent(f"""\
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
          until: ["<|im_end|>"]
          max_gen_toks: 256
          temperature: 0.7
        metric_list:
          - metric: exact_match
        """))
    args = (f"model={MODEL},base_url={url}/v1/completions,tokenizer_backend=none,"
            f"tokenized_requests=False,num_concurrent={concurrency},max_retries=1")
    exe = shutil.which("lm_eval") or shutil.which("lm-eval")
    cli = [exe] if exe else [sys.executable, "-m", "lm_eval"]
    return [*cli, "--model", "local-completions", "--model_args", args, "--tasks", "qfarm_prompts",
            "--include_path", str(task), "--output_path", str(work / "out")]


def inspect_command(work: Path, url: str, data: Path, concurrency: int) -> list[str]:
    """inspect_ai's task over ``data``: one sample a prompt, ``generate()``, no scorer."""
    task = work / "qfarm_prompts.py"
    task.write_text(textwrap.dedent(f"""\
        import json
        from inspect_ai import Task, task
        from inspect_ai.dataset import Sample
        from inspect_ai.solver import generate

        @task
        def qfarm_prompts():
            lines = open({str(data)!r}).read().splitlines()
            return Task(dataset=[Sample(input=json.loads(l)["prompt"]) for l in lines],
                        solver=generate())
        """))
    os.environ["SIM_BASE_URL"] = f"{url}/v1"
    os.environ["SIM_API_KEY"] = "none"
    exe = shutil.which("inspect")
    cli = [exe] if exe else [sys.executable, "-m", "inspect_ai"]
    return [*cli, "eval", str(task), "--model", f"openai-api/sim/{MODEL}",
            "--max-connections", str(concurrency), "--log-dir", str(work / "logs")]


COMMANDS = {"lm-eval": lm_eval_command, "inspect_ai": inspect_command}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2000, help="distinct questions, one prompt each")
    ap.add_argument("--quick", action="store_true",
                    help="seconds, figures meaningless: 20 prompts (CI; skips peers not installed)")
    args = ap.parse_args(argv)
    if args.quick:
        args.jobs = 20
    installed = {name: importlib.util.find_spec(module) is not None
                 for name, module in PEERS.items()}  # fmt: skip
    for name, ok in installed.items():
        if not ok:
            print(f"{name}: not installed, skipped (pip install {name.replace('_', '-')})")
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
    with start_simulator(max_num_seqs=TABLE_ENDPOINT.max_num_seqs, ttft_ms=lat.ttft_ms,
                         tpot_ms=lat.tpot_ms) as sim:  # fmt: skip
        log = RequestLog([sim])
        ideal = ideal_rps([TABLE_ENDPOINT], 1.0)
        print(f"{args.jobs} prompts; endpoint: vLLM SIMULATOR, {concurrency} slots, "
              f"{lat.ttft_ms[0]:g} ms a request; {os.cpu_count()} cores")
        for name, ok in installed.items():
            if not ok:
                continue
            peer_dir = work / name
            peer_dir.mkdir()
            cmd = COMMANDS[name](peer_dir, sim.url, data, concurrency)
            cpu0, t0 = children_cpu_s(), time.perf_counter()
            done = subprocess.run(cmd, cwd=peer_dir, capture_output=True, text=True)
            wall, cpu = time.perf_counter() - t0, children_cpu_s() - cpu0
            entries = log.take(1)
            if done.returncode != 0:
                print(f"{name}: exited {done.returncode}: {done.stderr[-600:]}")
                continue
            requests = max(len(entries), 1)
            print(f"{name}: requests={len(entries)} flow={flow_ratio(entries, ideal):.3f} "
                  f"whole={args.jobs / wall / ideal:.3f} wall={wall:.1f}s "
                  f"cpu={cpu * 1000 / requests:.2f} ms/request (SIMULATED)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
