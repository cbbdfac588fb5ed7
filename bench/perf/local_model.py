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

``--share-samples`` measures instead what the policy's ``share_samples`` saves on this
server (docs/llm.md, 'Shared samples'): the first ``--questions`` of ``real_model.jsonl``
in ``--modes`` with ``--samples`` samples each (the CPU policy, temperature 0.7), swept by
``qfarm sweep --eager --keep-answers`` twice, back to back on one server: without the switch,
then with it. Per sweep: the command's wall time, the span from the first job's start to the
last one's end, the prompt tokens sent (the server's ``usage``) and the prompt tokens the
server evaluated: the same less the prefix its KV cache still held from the request before,
which it logs per request ("N prefix-match hit, remaining M prompt tokens to eval"). The two
sweeps' requests differ in their seeds (each sample's own hash without the switch, the
question's base + i with it), so their answers are compared but not expected to agree; the
answers of requests that do not change are checked by sending the last sample of
``--replay`` questions of each sweep again exactly as the gateway sent it, twice: after
another question's prompt (the cache holding only the prompts' common opening), then at once
again (the cache holding all of it, as in the sweep), each answer compared with the row's.

    python -m bench.perf.local_model --share-samples [--questions 10] [--modes quote] [--samples 3]

Last line: ``local_model_shared_evaluated_ratio=`` (prompt tokens evaluated with ÷ without).

``--prompt-order`` measures the policy's ``prompt_order`` the same way (docs/grounding.md,
'Prompts'): the first ``--questions`` of ``real_model.jsonl`` in ``--modes`` (all three by
default here) with ``--samples`` samples (1), the CPU policy, swept twice back to back on
one server: ``instructions_first`` (the default), then ``evidence_first``. Per sweep the
same figures as above, and per mode what the verifier made of the answers (rows per verdict,
answers carrying an ``[E#]`` tag, format collapsed): the two orders ask the same words in
another order, so their answers are expected to differ; what matters is whether they read
worse.

    python -m bench.perf.local_model --prompt-order [--questions 10] [--modes quote,...]

Last line: ``local_model_order_evaluated_ratio=`` (prompt tokens evaluated evidence first ÷
instructions first).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qfarm.common.grounding.preflight import run_preflight
from qfarm.common.grounding.prompts import build_prompt
from qfarm.common.jobs import seed_for
from qfarm.common.models import Mode
from qfarm.common.policy import LOCAL_CPU_POLICY, build_policy
from qfarm.common.profiles import profile_id_for_model
from qfarm.common.questions import parse_questions
from qfarm.common.settings import Settings

if TYPE_CHECKING:
    from qfarm.ops.local.launch import LocalModelHandle

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
    return [
        build_prompt(q, MODE, hits, policy).text for q, hits in zip(questions, found, strict=True)
    ]


def _direct(url: str, model: str, prompts: list[str], max_tokens: int) -> tuple[float, str]:
    from openai import OpenAI

    client = OpenAI(base_url=f"{url}/v1", api_key="local", timeout=600)
    prompt_tokens = tokens = 0
    start = time.perf_counter()
    for prompt in prompts:
        reply = client.completions.create(
            model=model,
            prompt=prompt,
            max_tokens=max_tokens,
            temperature=0.0,
            top_p=1.0,
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
    cmd = [
        sys.executable,
        "-m",
        "qfarm",
        "sweep",
        str(qfile),
        "--modes",
        MODE.value,
        "-n",
        "1",
        "--eager",
        "--burn",
        "--quiet",
        "--out",
        str(out),
        *policy_args,
    ]
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


# llama-cpp-python's server (verbose, its default) logs each request that reuses the KV cache
# left by the request before it: the shared prefix is not evaluated again.
PREFIX_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")
FULL_HIT = "Llama.generate: full prompt already cached"


@dataclass
class Sweep:
    label: str
    wall_s: float  # the qfarm sweep command, process start to exit
    span_s: float  # first job started to last job finished (rows)
    rows: list[dict[str, Any]]
    reused: int  # prompt tokens the server took from its KV cache (its log)
    hits: int  # requests that reused a prefix
    full_hits: int  # requests whose whole prompt was cached (not counted in ``reused``)

    def total(self, key: str) -> int:
        return sum((row.get("usage") or {}).get(key) or 0 for row in self.rows)

    @property
    def after_same_prompt(self) -> int:
        """Requests sent right after one of the same question and mode (the same prompt)."""
        sent = sorted(self.rows, key=lambda r: r["llm_request"]["sent_at"])
        keys = [(r["question_id"], r["mode"]) for r in sent]
        return sum(a == b for a, b in zip(keys, keys[1:], strict=False))

    @property
    def evaluated(self) -> int:
        return self.total("prompt_tokens") - self.reused


def _log_reuse(log: Path, start: int) -> tuple[int, int, int]:
    """Prompt tokens reused, requests with a prefix hit and with the whole prompt cached,
    from the server's log after byte ``start``."""
    with log.open("rb") as fh:
        fh.seek(start)
        text = fh.read().decode("utf-8", "replace")
    hits = [int(m[1]) for m in PREFIX_HIT.finditer(text)]
    return sum(hits), len(hits), text.count(FULL_HIT)


def _sweep(handle: LocalModelHandle, label: str, questions: int, modes: list[str], samples: int,
           out: Path, policy_args: list[str], share: bool) -> Sweep:  # fmt: skip
    """One ``qfarm sweep`` subprocess on the server, answers kept; its figures."""
    log = handle.workdir / handle.LOG_NAME
    start = log.stat().st_size
    env = dict(os.environ)
    for key, value in handle.settings_overrides().items():
        env[f"QFARM_{key.upper()}"] = str(value).lower() if isinstance(value, bool) else str(value)
    # From the checkout, with the question file's path in it: the run's manifest names the
    # file as the repository does, not where this machine keeps the checkout.
    repo = QUESTIONS.parents[2]
    cmd = [sys.executable, "-m", "qfarm", "sweep", str(QUESTIONS.relative_to(repo)),
           "--limit", str(questions), "--modes", ",".join(modes), "-n", str(samples), "--eager",
           "--keep-answers", "--quiet", "--out", str(out.resolve()), *policy_args,
           *(["--share-samples"] if share else [])]  # fmt: skip
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=repo)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"qfarm sweep failed ({done.returncode}):\n{done.stderr[-2000:]}")
    run = max(out.iterdir(), key=lambda p: p.stat().st_mtime)
    rows = [
        json.loads(line) for line in (run / "rows.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    span = max(r["finished_at"] for r in rows) - min(r["started_at"] for r in rows)
    return Sweep(label, wall, span, rows, *_log_reuse(log, start))


@dataclass
class Replayed:
    label: str  # the sweep
    key: str  # question id, mode, sample
    row: str  # the sweep's answer
    cold: str  # sent after another question's prompt: only the shared instructions cached
    warm: str  # the same body at once again: all of the prompt but its last token cached


def _replay(handle: LocalModelHandle, sweeps: list[Sweep], count: int,
            overrides: dict[str, Any]) -> list[Replayed]:  # fmt: skip
    """The last sample (served from the cache after the others of its prompt in a sweep) of
    the first ``count`` questions of each sweep, sent again as the gateway sent it: once after
    another question's prompt, then at once again; the answers beside the row's."""
    from openai import OpenAI

    from qfarm.worker.retrieval.embedded import EmbeddedRetriever

    policy = build_policy(overrides)
    profile = profile_id_for_model(handle.model)
    parsed = parse_questions(str(QUESTIONS), QUESTIONS.read_text(encoding="utf-8"))
    by_id = {q.id: q for q in parsed}
    client = OpenAI(base_url=f"{handle.url}/v1", api_key="local", timeout=600)
    out = []
    retriever = EmbeddedRetriever(Settings().embedded_index_path())
    try:
        for sweep in sweeps:
            shared = sweep.label == "with"
            last = max(r["sample_index"] for r in sweep.rows)
            wanted = [r for r in sweep.rows if r["sample_index"] == last][:count]
            for row in wanted:
                q = by_id[row["question_id"]]
                mode = Mode(row["mode"])
                hits = retriever.search(q.text, top_k=policy.top_k, title_boost=policy.title_boost)
                pre = run_preflight(q.text, mode, policy, profile)
                body = {
                    "model": handle.model, "prompt": build_prompt(q.text, mode, hits, policy, pre).text,
                    "max_tokens": policy.max_tokens, "temperature": policy.temperature, "top_p": 1.0,
                    "stop": STOP, "seed": seed_for(q.id, mode, row["sample_index"], shared=shared),
                }  # fmt: skip
                texts = [client.completions.create(**body).choices[0].text for _ in range(2)]
                key = f"{q.id} {mode.value} {row['sample_index']}"
                out.append(Replayed(sweep.label, key, row.get("answer") or "", *texts))
    finally:
        retriever.close()
    return out


def _print_sweeps(what: str, sweeps: list[Sweep], *, after_same_prompt: bool) -> None:
    """The two sweeps' table: one row each, named by ``what`` they differ in."""
    same = ["requests right after one of the same prompt"] if after_same_prompt else []
    head = [what, "jobs", "errors", "wall s (command)", "first job to last s", *same,
            "prompt tokens sent", "evaluated by the server", "reused from its cache",
            "completion tokens"]  # fmt: skip
    print()
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for s in sweeps:
        errors = sum(1 for r in s.rows if r.get("error"))
        cells = [s.label, str(len(s.rows)), str(errors), f"{s.wall_s:.1f}", f"{s.span_s:.1f}",
                 *([str(s.after_same_prompt)] if after_same_prompt else []),
                 f"{s.total('prompt_tokens'):,}", f"{s.evaluated:,}",
                 f"{s.reused:,} ({s.hits} requests"
                 f"{f', {s.full_hits} whole' if s.full_hits else ''})",
                 f"{s.total('completion_tokens'):,}"]  # fmt: skip
        print("| " + " | ".join(cells) + " |")


def share_samples(args: argparse.Namespace) -> int:
    """Without and with ``share_samples``, back to back on one server (module docstring)."""
    from qfarm.ops.local.launch import start_local_model

    modes = args.modes.split(",")
    overrides = dict(LOCAL_CPU_POLICY)
    policy_args = [f"--policy={k}={json.dumps(v)}" for k, v in overrides.items()]
    temperature = build_policy(overrides).temperature
    with (
        tempfile.TemporaryDirectory(prefix="qfarm-local-share-") as tmp,
        start_local_model() as handle,
    ):
        runs = args.out or Path(tmp)
        print(
            f"{handle.model} on {handle.description}; {args.questions} questions of "
            f"{QUESTIONS.name} x {','.join(modes)} x {args.samples} samples, temperature "
            f"{temperature:g}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        sweeps = []
        for label, share in (("without", False), ("with", True)):
            # A prompt that shares no prefix with the sweep's: neither sweep starts with the
            # other's last prompt in the server's cache (and the model is loaded before any clock).
            _direct(handle.url, handle.model, ["Hello"], 4)
            sweep = _sweep(handle, label, args.questions, modes, args.samples, runs / label,
                           policy_args, share)  # fmt: skip
            sweeps.append(sweep)
            print(f"{label} share_samples: wall {sweep.wall_s:.1f} s, span {sweep.span_s:.1f} s, "
                  f"prompt tokens {sweep.total('prompt_tokens')} sent, {sweep.evaluated} evaluated "
                  f"({sweep.hits} requests reused {sweep.reused} from the cache), load "
                  f"{os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
        replayed = _replay(handle, sweeps, args.replay, overrides)
    off, on = sweeps
    answers = {(r["question_id"], r["mode"], r["sample_index"]): r.get("answer") for r in off.rows}
    agree = sum(answers.get((r["question_id"], r["mode"], r["sample_index"])) == r.get("answer")
                for r in on.rows)  # fmt: skip
    _print_sweeps("share_samples", sweeps, after_same_prompt=True)
    print(
        f"\nanswers equal across the two sweeps: {agree} of {len(on.rows)} (their seeds differ "
        "by design)"
    )
    for r in replayed:
        print(f"sent again ({r.label}, {r.key}): after another prompt "
              f"{'=' if r.cold == r.row else '≠'} the row's, at once again "
              f"{'=' if r.warm == r.row else '≠'} the row's, the two "
              f"{'=' if r.cold == r.warm else '≠'}")  # fmt: skip
    same = sum(r.cold == r.row for r in replayed), sum(r.warm == r.row for r in replayed)
    print(f"requests sent again, answer equal to the row's: after another prompt {same[0]} of "
          f"{len(replayed)}, at once again {same[1]} of {len(replayed)}")  # fmt: skip
    print(f"local_model_shared_evaluated_ratio={on.evaluated / max(off.evaluated, 1):.3f}")
    return 0


TAG = re.compile(r"\[E\d+")


def prompt_order(args: argparse.Namespace) -> int:
    """``instructions_first`` then ``evidence_first``, back to back on one server (module
    docstring)."""
    from qfarm.ops.local.launch import start_local_model

    modes = args.modes.split(",")
    policy_args = [f"--policy={k}={json.dumps(v)}" for k, v in LOCAL_CPU_POLICY.items()]
    with (
        tempfile.TemporaryDirectory(prefix="qfarm-local-order-") as tmp,
        start_local_model() as handle,
    ):
        runs = args.out or Path(tmp)
        print(f"{handle.model} on {handle.description}; {args.questions} questions of "
              f"{QUESTIONS.name} x {','.join(modes)} x {args.samples} samples, the CPU policy; "
              f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
        sweeps = []
        for order in ("instructions_first", "evidence_first"):
            _direct(handle.url, handle.model, ["Hello"], 4)  # neither starts on the other's cache
            sweep = _sweep(handle, order, args.questions, modes, args.samples, runs / order,
                           [*policy_args, f"--policy=prompt_order={json.dumps(order)}"],
                           False)  # fmt: skip
            sweeps.append(sweep)
            print(f"{order}: wall {sweep.wall_s:.1f} s, span {sweep.span_s:.1f} s, prompt tokens "
                  f"{sweep.total('prompt_tokens')} sent, {sweep.evaluated} evaluated "
                  f"({sweep.hits} requests reused {sweep.reused}), load "
                  f"{os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    _print_sweeps("prompt_order", sweeps, after_same_prompt=False)
    print()
    print("| prompt_order | mode | rows | STRICT | HYBRID | UNGROUNDED | answers with an [E#] tag "
          "| format collapsed |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for s in sweeps:
        for mode in modes:
            rows = [r for r in s.rows if r["mode"] == mode and not r.get("error")]
            verdicts = [r.get("verdict") for r in rows]
            tagged = sum(bool(TAG.search(r.get("answer") or "")) for r in rows)
            collapsed = sum(bool(r.get("format_collapsed")) for r in rows)
            print(f"| {s.label} | {mode} | {len(rows)} | {verdicts.count('STRICT')} | "
                  f"{verdicts.count('HYBRID')} | {verdicts.count('UNGROUNDED')} | {tagged} | "
                  f"{collapsed} |")  # fmt: skip
    first, then = sweeps
    print(f"local_model_order_evaluated_ratio={then.evaluated / max(first.evaluated, 1):.3f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.perf.local_model", description=__doc__.split("\n")[0]
    )
    p.add_argument("-n", "--prompts", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="1 prompt, 1 round")
    p.add_argument(
        "--share-samples",
        action="store_true",
        help="sweeps without and with share_samples instead (module docstring)",
    )
    p.add_argument(
        "--prompt-order",
        action="store_true",
        help="sweeps with the instructions first and with the evidence first (module docstring)",
    )
    p.add_argument("--questions", type=int, default=10,
                   help="--share-samples, --prompt-order: questions")
    p.add_argument("--modes", default=None,
                   help="--share-samples, --prompt-order: modes, comma-separated (quote; all "
                        "three for --prompt-order)")
    p.add_argument("--samples", type=int, default=None,
                   help="--share-samples, --prompt-order: -n of the sweeps (3; 1)")
    p.add_argument("--out", type=Path,
                   help="--share-samples, --prompt-order: keep the two runs here")
    p.add_argument(
        "--replay",
        type=int,
        default=3,
        help="--share-samples: samples of each sweep sent again alone",
    )
    args = p.parse_args(argv)
    if args.prompt_order:
        args.modes = args.modes or ",".join(m.value for m in Mode)
        args.samples = args.samples or 1
        if args.quick:  # 1 question in every mode: a minute or two on this CPU
            args.questions = 1
        return prompt_order(args)
    args.modes, args.samples = args.modes or "quote", args.samples or 3
    if args.share_samples:
        if args.quick:  # 1 question, 2 samples: a minute or two on this CPU
            args.questions, args.samples, args.replay = 1, 2, 1
        return share_samples(args)
    if args.quick:  # that the script runs, in seconds (the CPU model answers a prompt in ~5 s)
        args.prompts, args.rounds = 1, 1
    from qfarm.ops.local.launch import start_local_model

    overrides = {**LOCAL_CPU_POLICY, "temperature": 0.0}
    policy_args = [f"--policy={k}={json.dumps(v)}" for k, v in overrides.items()]
    max_tokens = int(overrides["max_tokens"])
    questions = _questions(args.prompts)
    prompts = _prompts(questions, overrides)
    with (
        tempfile.TemporaryDirectory(prefix="qfarm-local-perf-") as tmp,
        start_local_model() as handle,
    ):
        qfile = Path(tmp) / "questions.txt"
        qfile.write_text("\n".join(questions) + "\n", encoding="utf-8")
        print(
            f"{handle.model} on {handle.description} at {handle.url}; {len(prompts)} prompts "
            f"({MODE.value}), {args.rounds} round(s), temperature 0, max_tokens {max_tokens}"
        )
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
            print(
                f"round {r + 1} ({'direct' if r % 2 == 0 else 'farm'} first): direct {d:.1f} s "
                f"({d_tok}), farm {f:.1f} s ({f_tok}), ratio {f / d:.2f}"
            )
    n = len(prompts) * args.rounds
    print(
        f"ratio per round: median {statistics.median(ratios):.2f}, range "
        f"{min(ratios):.2f}-{max(ratios):.2f} (the spread is the machine's noise: a figure "
        "inside it is no overhead this run can see)"
    )
    print(f"direct (openai SDK): {direct_s:.1f} s, {direct_s / n:.2f} s a prompt")
    print(
        f"farm (qfarm sweep --eager): {farm_s:.1f} s, {farm_s / n:.2f} s a prompt; "
        f"{(farm_s - direct_s) / n:.2f} s a prompt around the model"
    )
    print(f"local_model_overhead_ratio={farm_s / direct_s:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
