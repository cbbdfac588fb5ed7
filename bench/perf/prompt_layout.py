"""What the prompt layout leaves shareable by a server's prefix cache.

A prefix cache (vLLM's automatic prefix caching, llama.cpp's prompt cache) serves only
a prompt's leading tokens that an earlier prompt had too. This prints, over the first
``--questions`` questions of general.jsonl with their evidence retrieved from the
saturation table's index, how long each mode's prompt is and how many of its leading
characters it shares (medians):

* with the next question's prompt in the same mode: what every request of a mode can
  take from the cache (the chat template and the mode's fixed instructions);
* with the same question's prompt in each other mode: what a question's modes could take
  from each other if they reached the same endpoint one after another; beside it, the
  longest run the two prompts share anywhere (the evidence blocks): what they would share
  if that run came first.

Samples of one question × mode share their whole prompt (docs/llm.md, 'Shared samples').
No model is asked; the figures are the prompts' own.

    .venv/bin/python -m bench.perf.prompt_layout [--questions 60] [--evidence-first] [--quick]

``--evidence-first`` builds the prompts with ``prompt_order=evidence_first`` (the evidence
after a system turn every mode shares, the mode's instructions after it).
"""

from __future__ import annotations

import argparse
from difflib import SequenceMatcher
from itertools import combinations
from statistics import median

from bench.perf.saturation import table_index
from bench.perf.sharing import QUESTIONS
from qfarm.common.grounding.prompts import build_prompt
from qfarm.common.models import Mode
from qfarm.common.policy import build_policy
from qfarm.common.settings import Settings
from qfarm.producer.api import QuestionSet


def common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def longest_run(a: str, b: str) -> int:
    match = SequenceMatcher(None, a, b, autojunk=False).find_longest_match(0, len(a), 0, len(b))
    return match.size


def share(parts: list[int], wholes: list[int]) -> float:
    return median(p / w for p, w in zip(parts, wholes, strict=True))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=60, help="questions of general.jsonl (60)")
    p.add_argument("--evidence-first", action="store_true",
                   help="the policy's prompt_order=evidence_first instead of the default")
    p.add_argument("--quick", action="store_true", help="4 questions (CI: the script runs)")
    args = p.parse_args(argv)
    if args.quick:
        args.questions = 4
    from qfarm.worker.retrieval import open_retriever

    order = "evidence_first" if args.evidence_first else "instructions_first"
    policy = build_policy({"prompt_order": order})
    questions = QuestionSet.from_file(QUESTIONS).questions[: max(2, args.questions)]
    prompts: dict[Mode, list[str]] = {m: [] for m in Mode}
    retriever = open_retriever(Settings(index_path=table_index()))
    try:
        for q in questions:
            hits = retriever.search(q.text, top_k=policy.top_k, title_boost=policy.title_boost)
            for mode in Mode:
                prompts[mode].append(build_prompt(q.text, mode, hits, policy).text)
    finally:
        retriever.close()
    print(f"{len(questions)} questions of general.jsonl, prompt_order={order}; medians in "
          "characters")
    print("\n| mode | prompt | shared with the next question's prompt, same mode |")
    print("|---|---|---|")
    for mode, texts in prompts.items():
        across = [common_prefix(a, b) for a, b in zip(texts, texts[1:], strict=False)]
        print(f"| {mode.value} | {median(len(t) for t in texts):.0f} | {median(across):.0f} |")
    print("\n| modes, same question | shared prefix | of the shorter | longest shared run | of the shorter |")
    print("|---|---|---|---|---|")
    for a, b in combinations(Mode, 2):
        pairs = list(zip(prompts[a], prompts[b], strict=True))
        shared = [common_prefix(x, y) for x, y in pairs]
        run = [longest_run(x, y) for x, y in pairs]
        shorter = [min(len(x), len(y)) for x, y in pairs]
        print(f"| {a.value} / {b.value} | {median(shared):.0f} | {share(shared, shorter):.1%} "
              f"| {median(run):.0f} | {share(run, shorter):.1%} |")


if __name__ == "__main__":
    main()
