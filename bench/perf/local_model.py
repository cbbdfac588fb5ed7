"""The farm's overhead on a real server: the same prompts by the openai SDK and by a sweep.

One llama.cpp server on the local CPU model (``make install-local``) serves both
sides, in one run, alternated round by round (and which side goes first with
them) so that a busy neighbour slows both alike:

* **direct**: the official ``openai`` SDK sends each prompt the farm would send
  (retrieval and prompt built beforehand, outside the clock) to
  ``/v1/completions`` with the farm's sampling (max_tokens, stop, top_p 1,
  temperature 0), one at a time, as the one-slot server takes them;
* **farm**: ``qfarm sweep FILE --eager --burn`` as a subprocess against the
  same server (``QFARM_LLM_ENDPOINTS``, the settings ``--local-model`` would
  set, the CPU policy, temperature 0): process start, index, retrieval,
  prompt, gateway, verification, rows and summary, all on the clock.

Both sides send the same prompts (the prompt tokens printed match) with greedy
decoding; llama.cpp's prompt cache can still make a completion differ by a few
tokens, so the completion tokens are printed too. On two shared cores the
model's own time varies from one pass to the next by more than the farm can
cost, so each round's ratio is printed with the median and range: a ratio
inside that range is no overhead this run can see. The figures are about a 135M model on CPU, where the
model is slow and the farm's share small; on a GPU server the same overhead
weighs more.

    python -m bench.perf.local_model            # 10 prompts, 3 rounds
    python -m bench.perf.local_model --quick    # 1 prompt, 1 round

Last line: ``local_model_overhead_ratio=`` (farm wall time ÷ direct wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from qfarm.common.grounding.prompts import build_prompt
from qfarm.common.models import Mode
from qfarm.common.policy import LOCAL_CPU_POLICY, build_policy
from qfarm.common.questions import parse_questions
from qfarm.common.settings import Settings

QUESTIONS = Path(__file__).resolve().parents[1] / "questions" / "real_model.jsonl"
MODE = Mode.CLAIM_LATTICE_POINTER
STOP = ["<|im_end|>"]


def _questions(n: int) -> list[str]:
    parsed = parse_questions(str(QUESTIONS), QUESTIONS.read_text(encoding="utf-8"))
    return [q.text for q in parsed[:n]]


def _prompts(questions: list[str], policy_overrides: dict) -> list[str]:
    """The prompts a sweep builds for these questions (same retrieval, same policy)."""
    from qfarm.worker.retrieval.embedded import EmbeddedRetriever

    policy = build_policy(policy_overrides)
    retriever = EmbeddedRetriever(Settings().embedded_index_path())
    found = retriever.search_many(questions, top_k=policy.top_k, title_boost=policy.title_boost)
    return [build_prompt(q, MODE, hits, policy).text for q, hits in zip(questions, found, strict=True)]


def _direct(url: str, model: str, prompts: list[str], max_tokens: int) -> tuple[float, str]:
    from openai import OpenAI

    client = OpenAI(base_url=f"{url}/v1", api_key="local", timeout=600)
    prompt_tokens = tokens = 0
    start = time.perf_counter()
    for prompt in prompts:
        reply = client.completions.create(
            model=model, prompt=prompt, max_tokens=max_tokens, temperature=0.0, top_p=1.0,
            stop=STOP,
        )
        if reply.usage:
            prompt_tokens += reply.usage.prompt_tokens
            tokens += reply.usage.completion_tokens
    return time.perf_counter() - start, f"{prompt_tokens} prompt + {tokens} completion tokens"


def _farm(handle, qfile: Path, out: Path, policy_args: list[str]) -> tuple[float, str]:  # noqa: ANN001
    """Wall time of one ``qfarm sweep`` subprocess and its token counts."""
    env = dict(os.environ)
    for key, value in handle.settings_overrides().items():
        env[f"QFARM_{key.upper()}"] = str(value).lower() if isinstance(value, bool) else str(value)
    cmd = [sys.executable, "-m", "qfarm", "sweep", str(qfile), "--modes", MODE.value, "-n", "1",
           "--eager", "--burn", "--quiet", "--out", str(out), *policy_args]
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"qfarm sweep failed ({done.returncode}):\n{done.stderr[-2000:]}")
    run = max(out.iterdir(), key=lambda p: p.stat().st_mtime)
    prompt_tokens = tokens = errors = 0
    for line in (run / "rows.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        prompt_tokens += (row.get("usage") or {}).get("prompt_tokens") or 0
        tokens += (row.get("usage") or {}).get("completion_tokens") or 0
        errors += bool(row.get("error"))
    if errors:
        raise SystemExit(f"{errors} farm rows failed; see {run}/rows.jsonl")
    return wall, f"{prompt_tokens} prompt + {tokens} completion tokens"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.perf.local_model",
                                description=__doc__.split("\n")[0])
    p.add_argument("-n", "--prompts", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="1 prompt, 1 round")
    args = p.parse_args(argv)
    if args.quick:  # that the script runs, in seconds (the CPU model answers a prompt in ~5 s)
        args.prompts, args.rounds = 1, 1
    from qfarm.ops.local.launch import start_local_model

    overrides = {**LOCAL_CPU_POLICY, "temperature": 0.0}
    policy_args = [f"--policy={k}={json.dumps(v)}" for k, v in overrides.items()]
    max_tokens = int(overrides["max_tokens"])
    questions = _questions(args.prompts)
    prompts = _prompts(questions, overrides)
    with tempfile.TemporaryDirectory(prefix="qfarm-local-perf-") as tmp, \
            start_local_model() as handle:
        qfile = Path(tmp) / "questions.txt"
        qfile.write_text("\n".join(questions) + "\n", encoding="utf-8")
        print(f"{handle.model} on {handle.description} at {handle.url}; {len(prompts)} prompts "
              f"({MODE.value}), {args.rounds} round(s), temperature 0, max_tokens {max_tokens}")
        _direct(handle.url, handle.model, prompts[:1], max_tokens)  # warm the server's cache
        direct_s = farm_s = 0.0
        ratios = []
        for r in range(args.rounds):
            # Alternate which side goes first: a neighbour's burst then hits both alike.
            if r % 2 == 0:
                d, d_tok = _direct(handle.url, handle.model, prompts, max_tokens)
                f, f_tok = _farm(handle, qfile, Path(tmp) / f"runs{r}", policy_args)
            else:
                f, f_tok = _farm(handle, qfile, Path(tmp) / f"runs{r}", policy_args)
                d, d_tok = _direct(handle.url, handle.model, prompts, max_tokens)
            direct_s, farm_s = direct_s + d, farm_s + f
            ratios.append(f / d)
            print(f"round {r + 1} ({'direct' if r % 2 == 0 else 'farm'} first): direct {d:.1f} s "
                  f"({d_tok}), farm {f:.1f} s ({f_tok}), ratio {f / d:.2f}")
    n = len(prompts) * args.rounds
    print(f"ratio per round: median {statistics.median(ratios):.2f}, range "
          f"{min(ratios):.2f}-{max(ratios):.2f} (the spread is the machine's noise: a figure "
          "inside it is no overhead this run can see)")
    print(f"direct (openai SDK): {direct_s:.1f} s, {direct_s / n:.2f} s a prompt")
    print(f"farm (qfarm sweep --eager): {farm_s:.1f} s, {farm_s / n:.2f} s a prompt; "
          f"{(farm_s - direct_s) / n:.2f} s a prompt around the model")
    print(f"local_model_overhead_ratio={farm_s / direct_s:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
