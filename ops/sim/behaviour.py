"""Answer generation from the evidence blocks in a prompt (pure, deterministic).

The simulator reads the prompt back with ``qfarm.common.grounding.prompts.parse_prompt`` (mode,
question, evidence blocks) and writes an answer in the format that mode asks
for. A *good* answer passes the verifier (docs/grounding.md, 'Verification') by construction: quotes are
whole sentences copied verbatim from the block they cite, pointer claims are
verbatim sentences (so every claim shares a run of far more than 4 tokens with
its block) and JSON warrants are verbatim spans of the cited block. Blocks whose
title shares a word with the question are preferred, so TITLE_MISMATCH is rare.

A *bad* answer fails the way small models do, at configurable rates:

=================  ===========================================================
failure            what the answer looks like (and the verdict it earns)
=================  ===========================================================
format_collapse    evidence sentences as prose, no tags/quotes/JSON (UNGROUNDED)
untagged_prose     a good answer plus an unsupported untagged line (HYBRID)
wrong_pointer      one claim cites a block it does not come from (HYBRID, or
                   UNGROUNDED when it is the only claim)
denial             "the evidence does not mention ..." although it does
                   (UNGROUNDED; the answerability sidecar's case)
broken_json        claim_lattice only: the JSON is cut short (UNGROUNDED)
=================  ===========================================================

Behaviours a real model showed and the failures above never produced (a
135M-parameter model on CPU: docs/llm.md, 'What a real model wrote'). Every
profile leaves them at 0, so simulated runs that do not ask for them are
unchanged; ``--rate KIND=P`` turns one on:

=================  ===========================================================
paraphrase         one line in the model's own words, in every mode: no tag,
                   no quote, no JSON ("The answer is: ...") (UNGROUNDED)
question_echo      the question written back as the answer (UNGROUNDED)
bare_pointer       ids outside the contract's spelling: ``(E1)`` or
                   ``evidence "E1,"`` after a claim, ``"evidence_id": "E1"``
                   in JSON; a verbatim quote still verifies, a pointer or JSON
                   claim does not (UNGROUNDED outside quote mode)
runaway            prose that does not stop: evidence sentences and filler
                   until ``max_tokens`` cuts it mid-sentence (finish_reason
                   ``length``; UNGROUNDED)
partial_denial     the answer in prose, then "but the evidence does not
                   specify ...": a caveat, not a refusal (UNGROUNDED: untagged
                   prose; no DEFLECTION_DETECTED)
html_entities      a good answer with its apostrophes written as ``&#x27;``,
                   as a model trained on scraped HTML writes them
repetition         a sentence written twice: a good answer's first line again
                   at its end (in JSON mode, as prose); a duplicate claim
=================  ===========================================================

Rates are drawn once per choice. ``broken_json`` applies only to the JSON mode;
in other modes that share of draws gives a good answer. With a JSON constraint
(``response_format`` json_schema/json_object, ``structured_outputs`` json) the
answer is always valid JSON, so ``format_collapse`` and ``broken_json`` cannot
happen. Under a grammar (``structured_outputs`` grammar, regex or choice: what the
farm sends with ``structured_output`` on) the answer is text the grammar admits,
in the prompt's mode (``_constrained``): only ``wrong_pointer`` survives. That is
what a sweep comparing constrained and free answers should see.

Instruction following (a modelling assumption, stated so nobody mistakes it for
a measurement): when the prompt carries the quantifier reminder turn ("Quantifier
reminder: … at most N …"), the simulated model keeps at most N claims and its
format-collapse and untagged-prose rates are halved (``REMINDER_FAILURE_FACTOR``).
This lets an A/B sweep over ``quantifier_reminder_enabled`` exercise the whole
comparison path; what a real model does is what a real sweep measures.

Determinism: the output is a function of (prompt, seed, choice index) when
temperature > 0, and of the prompt alone at temperature 0 (greedy decoding
ignores the seed, as in vLLM). Tokens are counted with a crude word/punctuation
split (``count_tokens``); it drives the latency model and ``usage``, and is
close enough to a Llama tokenizer for load modelling (~1.2 tokens per word).
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from dataclasses import dataclass, fields, replace

from qfarm.common.grounding.prompts import parse_prompt
from qfarm.common.models import Mode
from qfarm.ops.sim.constraints import Constraint

FAILURE_KINDS: tuple[str, ...] = (
    "format_collapse",
    "untagged_prose",
    "wrong_pointer",
    "denial",
    "broken_json",
    # Seen in a real model's text (off in every profile):
    "paraphrase",
    "question_echo",
    "bare_pointer",
    "runaway",
    "partial_denial",
    "html_entities",
    "repetition",
)


@dataclass(frozen=True)
class BehaviourRates:
    """Probability of each failure per choice; the rest are good answers."""

    format_collapse: float = 0.0
    untagged_prose: float = 0.0
    wrong_pointer: float = 0.0
    denial: float = 0.0
    broken_json: float = 0.0
    paraphrase: float = 0.0
    question_echo: float = 0.0
    bare_pointer: float = 0.0
    runaway: float = 0.0
    partial_denial: float = 0.0
    html_entities: float = 0.0
    repetition: float = 0.0

    def __post_init__(self) -> None:
        total = sum(getattr(self, f.name) for f in fields(self))
        if any(getattr(self, f.name) < 0 for f in fields(self)) or total > 1.0 + 1e-9:
            raise ValueError(
                f"behaviour rates must be >= 0 and sum to at most 1 (got {self.as_dict()})"
            )

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def with_overrides(self, **rates: float) -> BehaviourRates:
        unknown = sorted(set(rates) - set(FAILURE_KINDS))
        if unknown:
            raise ValueError(f"unknown behaviour rate(s) {unknown}; known: {list(FAILURE_KINDS)}")
        return replace(self, **rates)


# "small-model" is the default: rates in the range published evaluations report
# for 7–8B instruction models on grounded formats, high enough that a 60-job
# smoke sweep shows STRICT, HYBRID and UNGROUNDED rows.
PROFILES: dict[str, BehaviourRates] = {
    "small-model": BehaviourRates(
        format_collapse=0.08,
        untagged_prose=0.10,
        wrong_pointer=0.10,
        denial=0.06,
        broken_json=0.12,
    ),
    "clean": BehaviourRates(),
    "noisy": BehaviourRates(
        format_collapse=0.18,
        untagged_prose=0.18,
        wrong_pointer=0.18,
        denial=0.12,
        broken_json=0.25,
    ),
}
DEFAULT_PROFILE = "small-model"

# The simulator's own notion of a content word, part of its modelled behaviour (changing it
# changes simulated answers); the farm's sets live in common/.
SIM_STOP_WORDS = frozenset(
    """a an the and or but if of to in on at by for with from as is are was were be been being
    it its this that these those what which who whom whose when where why how do does did not no
    there their they them he she his her i you we our your my me about into than then so such
    can could would should will shall may might must has have had also only other some any all
    tell give name list describe explain many much most more""".split()
)
TOKEN_RE = re.compile(r"\w+|[^\w\s]")
WORD_RE = re.compile(r"\w+")
SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(])")
UNSAFE_CHARS = set('"[]{}\\\n<>`')


@dataclass(frozen=True)
class Completion:
    """One simulated choice."""

    text: str
    finish_reason: str  # "stop" or "length" ("abort" from an injected fault)
    completion_tokens: int
    failure: str | None  # the failure kind drawn, None for a good answer


# The text helpers are pure and see the same prompts and evidence blocks over and
# over (n samples of a question, one corpus), so they are memoized: the simulator
# often shares its host's cores with the farm it serves (bench/perf).
@functools.lru_cache(maxsize=4096)
def count_tokens(text: str) -> int:
    return len(TOKEN_RE.findall(text))


@functools.lru_cache(maxsize=16384)
def content_words(text: str) -> frozenset[str]:
    return frozenset(
        w for w in WORD_RE.findall(text.casefold()) if w not in SIM_STOP_WORDS and len(w) > 1
    )


def rng_for(prompt: str, seed: int | None, choice_index: int, temperature: float) -> random.Random:
    """Greedy decoding (temperature 0) ignores the seed and the choice index."""
    if temperature <= 0:
        key = f"greedy\x1f{prompt}"
    else:
        key = f"{seed}\x1f{choice_index}\x1f{prompt}"
    return random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big"))


@functools.lru_cache(maxsize=4096)
def split_sentences(text: str) -> tuple[str, ...]:
    """Sentences safe to copy verbatim into any of the three formats."""
    out = []
    for raw in SENTENCE_SPLIT_RE.split(text.strip()):
        s = " ".join(raw.split())
        if 25 <= len(s) <= 320 and len(WORD_RE.findall(s)) >= 5 and not (set(s) & UNSAFE_CHARS):
            out.append(s)
    return tuple(out)


@dataclass(frozen=True)
class Block:
    id: str
    title: str
    text: str
    sentences: tuple[str, ...]


@dataclass(frozen=True)
class Claim:
    text: str  # verbatim sentence of the source block
    source: str  # id of the block it was copied from
    cited: str  # id it is tagged with (differs from source for a wrong pointer)


def _blocks(parsed_blocks: tuple[tuple[str, str, str], ...]) -> list[Block]:
    blocks = []
    for bid, title, text in parsed_blocks:
        sentences = split_sentences(text)
        if not sentences:
            # No clean sentence: fall back to a 12-word window of plain words.
            words = [w for w in text.split() if not (set(w) & UNSAFE_CHARS)][:12]
            if len(words) >= 6:
                sentences = (" ".join(words),)
        blocks.append(Block(bid, title, text, sentences))
    return blocks


def _pick_claims(
    blocks: list[Block], question: str, rng: random.Random, greedy: bool
) -> list[Claim]:
    """Choose 1–3 sentences from the blocks most related to the question."""
    q_words = content_words(question)
    usable = [b for b in blocks if b.sentences]
    if not usable:
        return []

    def block_score(b: Block) -> float:
        title_hit = 2.0 * len(q_words & content_words(b.title))
        jitter = 0.0 if greedy else rng.random() * 1.5
        return title_hit + len(q_words & content_words(b.text)) + jitter

    ranked = sorted(usable, key=block_score, reverse=True)
    k = 1 if greedy else rng.choice((1, 2, 2, 3))
    claims = []
    for b in ranked[:k]:
        t_words = content_words(b.title)

        # A claim sharing a word with its block's title or the question never
        # triggers TITLE_MISMATCH, so prefer such sentences.
        def sentence_score(s: str, b_title: frozenset[str] = t_words) -> float:
            words = content_words(s)
            jitter = 0.0 if greedy else rng.random() * 0.5
            return 2 * len(words & q_words) + (1.5 if words & b_title else 0.0) + jitter

        best = max(b.sentences, key=sentence_score)
        claims.append(Claim(text=best, source=b.id, cited=b.id))
    return claims


def _mispoint(claims: list[Claim], blocks: list[Block], rng: random.Random) -> list[Claim]:
    """Re-tag one claim with a block that does not contain its words."""
    i = rng.randrange(len(claims))
    claim = claims[i]
    words = content_words(claim.text)
    others = [
        b
        for b in blocks
        if b.id != claim.source and len(words & content_words(b.text)) * 2 < len(words)
    ]
    wrong = rng.choice(others).id if others else f"E{len(blocks) + 1}"
    return [*claims[:i], replace(claim, cited=wrong), *claims[i + 1 :]]


LEADING_WH_RE = re.compile(
    r"^(?:who|what|which|when|where|why|how)\s+(?:is|are|was|were|did|does|do|has|have)\s+",
    re.I,
)


def _subject(question: str) -> str:
    """ "Who were the members of the Beatles?" -> "the members of the Beatles"."""
    q = LEADING_WH_RE.sub("", question.strip()).rstrip(" ?.!")
    return (q[:1].lower() + q[1:]) if q else "the answer to this question"


def _denial(question: str, structured: bool) -> str:
    if structured:
        return '{"claims": []}'
    return f"The provided evidence does not mention {_subject(question)}."


def _modeless(rng: random.Random, structured: bool) -> str:
    """The answer to a prompt the farm did not build."""
    if structured:
        return '{"claims": []}'
    return f"This is a simulated completion (qfarm vLLM simulator, sample {rng.getrandbits(32):08x})."


def _render(mode: Mode, claims: list[Claim], rng: random.Random, compact: bool = False) -> str:
    if mode is Mode.QUOTE:
        return "\n".join(f'"{c.text}" [{c.cited}]' for c in claims)
    if mode is Mode.CLAIM_LATTICE_POINTER:
        bullet = rng.choice(("", "", "- "))
        return "\n".join(f"{bullet}{c.text} [{c.cited}]" for c in claims)
    return _render_json(claims, rng, compact=compact)


def _render_json(
    claims: list[Claim], rng: random.Random, extra: dict | None = None, compact: bool = False
) -> str:
    items = []
    for c in claims:
        words = c.text.split()
        # A warrant is either the whole sentence or a verbatim run of >= 8 words.
        if len(words) > 12 and rng.random() < 0.5:
            start = rng.randrange(0, len(words) - 8)
            warrant = " ".join(words[start : start + max(8, len(words) // 2)])
        else:
            warrant = c.text
        items.append({"claim": c.text, "evidence": [c.cited], "warrant": warrant})
    if extra:
        items.append(extra)
    indent = None if compact else rng.choice((None, 2))
    return json.dumps({"claims": items}, ensure_ascii=False, indent=indent)


def _collapse(blocks: list[Block], rng: random.Random) -> str:
    sentences = [s for b in blocks for s in b.sentences[:2]]
    rng.shuffle(sentences)
    lines = sentences[: rng.choice((3, 4))]
    while len(lines) < 3:
        lines.append("This topic is covered in several of the provided passages in detail.")
    return "\n".join(lines)


UNSUPPORTED_LINES = (
    "Overall, this is one of the most widely discussed subjects in its field.",
    "Many experts consider this to be a remarkable and influential development.",
    "It is generally regarded as significant by historians and critics alike.",
)


def _with_untagged(mode: Mode, claims: list[Claim], rng: random.Random) -> str:
    line = rng.choice(UNSUPPORTED_LINES)
    if mode is Mode.QUOTE:
        # A "quote" the evidence does not contain: the quote-mode analogue of prose.
        return _render(mode, claims, rng) + f'\n"{line}" [{claims[0].cited}]'
    if mode is Mode.CLAIM_LATTICE_POINTER:
        return _render(mode, claims, rng) + "\n" + line
    return _render_json(claims, rng, extra={"claim": line, "evidence": [], "warrant": ""})


# --------------------------------------------------------------------------- a real model's habits


def _clause(sentence: str, words: int = 14) -> str:
    """The sentence's first ``words`` words without final punctuation: a model's restatement."""
    return " ".join(sentence.split()[:words]).rstrip(" .,;:!?")


def _paraphrase(claims: list[Claim], rng: random.Random) -> str:
    said = _clause(claims[0].text)
    lead = rng.choice(("The answer is: ", "According to the evidence, ", ""))
    if lead.startswith("According"):
        said = said[:1].lower() + said[1:]
    return f"{lead}{said}."


def _bare_pointer(mode: Mode, claims: list[Claim], blocks: list[Block], rng: random.Random) -> str:
    """Ids written, but not as the mode's contract spells them."""
    if mode is Mode.CLAIM_LATTICE:
        titles = {b.id: b.title for b in blocks}
        items = [{"claim": c.text, "evidence_id": c.cited, "title": titles.get(c.cited, "")}
                 for c in claims]
        return json.dumps({"claims": items}, ensure_ascii=False, indent=2)
    if mode is Mode.QUOTE:
        return "\n".join(f'"{c.text}" ({c.cited})' for c in claims)
    spellings = (
        "{text} ({id})",
        "{text} (evidence {id})",
        'The evidence for the claim "{text}" is from the document with evidence "{id}," '
        "which mentions it.",
    )
    return "\n".join(
        rng.choice(spellings).format(text=c.text.rstrip("."), id=c.cited) for c in claims
    )


RAMBLE_TOKENS = 4096
RAMBLE_FILLER = (
    "This is often referred to as one of the key ideas of the subject.",
    "In other words, it remains an important part of the story to this day.",
    "Many of these details were described again in later accounts",
)


def _ramble(blocks: list[Block], rng: random.Random) -> str:
    """Untagged paragraphs of evidence sentences and filler, longer than any budget we send."""
    sentences = [s for b in blocks for s in b.sentences] or list(RAMBLE_FILLER)
    paragraphs: list[str] = []
    current: list[str] = []
    used = 0
    while used < RAMBLE_TOKENS:
        s = rng.choice(sentences) if rng.random() < 0.6 else rng.choice(RAMBLE_FILLER)
        current.append(s)
        used += count_tokens(s)
        if len(current) == 4:
            paragraphs.append(" ".join(current))
            current = []
    paragraphs.append(" ".join(current))
    return "\n\n".join(p for p in paragraphs if p)


def _repeat(mode: Mode, claims: list[Claim], rng: random.Random) -> str:
    """A good answer with its first line written again at the end (prose in JSON mode,
    where the real model's repeated sentences were)."""
    if mode is Mode.CLAIM_LATTICE:
        said = " ".join(c.text for c in claims)
        return f"{said}\n{claims[0].text}"
    text = _render(mode, claims, rng)
    return f"{text}\n{text.splitlines()[0]}"


def _partial_denial(question: str, claims: list[Claim]) -> str:
    return f"{_clause(claims[0].text, 20)}, but the evidence does not specify {_subject(question)}."


def _html_entities(text: str) -> str:
    return text.replace("'", "&#x27;")


REAL_MODEL_HABITS = frozenset(
    {"paraphrase", "question_echo", "bare_pointer", "runaway", "partial_denial", "repetition"}
)


REMINDER_FAILURE_FACTOR = 0.5
_REMINDER_CAP_RE = re.compile(r"Quantifier reminder:[^\n]*?at most (\d+)")


def follows_reminder(prompt: str, rates: BehaviourRates) -> tuple[BehaviourRates, int | None]:
    """Rates and claim cap of a simulated model that heeds the quantifier reminder."""
    match = _REMINDER_CAP_RE.search(prompt)
    if match is None:
        return rates, None
    heeded = rates.with_overrides(
        format_collapse=rates.format_collapse * REMINDER_FAILURE_FACTOR,
        untagged_prose=rates.untagged_prose * REMINDER_FAILURE_FACTOR,
    )
    return heeded, int(match.group(1))


def _draw_failure(
    rates: BehaviourRates, rng: random.Random, mode: Mode, structured: bool
) -> str | None:
    u = rng.random()
    acc = 0.0
    for kind in FAILURE_KINDS:
        acc += getattr(rates, kind)
        if u < acc:
            # A schema-constrained reply is JSON of the right shape: no prose habit survives.
            if structured and kind in ("format_collapse", "broken_json", *REAL_MODEL_HABITS):
                return None
            if kind == "broken_json" and mode is not Mode.CLAIM_LATTICE:
                return None
            return kind
    return None


def _real_model_habit(
    failure: str | None,
    mode: Mode,
    question: str,
    claims: list[Claim],
    blocks: list[Block],
    rng: random.Random,
) -> str | None:
    """The answer text of a habit seen in a real model's text, None for any other draw."""
    if failure == "paraphrase":
        return _paraphrase(claims, rng)
    if failure == "question_echo":
        return question
    if failure == "bare_pointer":
        return _bare_pointer(mode, claims, blocks, rng)
    if failure == "runaway":
        return _ramble(blocks, rng)
    if failure == "partial_denial":
        return _partial_denial(question, claims)
    if failure == "repetition":
        return _repeat(mode, claims, rng)
    return None


def compose_answer(
    prompt: str,
    *,
    seed: int | None,
    choice_index: int = 0,
    temperature: float = 0.7,
    rates: BehaviourRates | None = None,
    constraint: Constraint | None = None,
) -> tuple[str, str | None]:
    """The full answer text for one choice, and the failure kind drawn (None: good)."""
    rates = rates if rates is not None else PROFILES[DEFAULT_PROFILE]
    rng = rng_for(prompt, seed, choice_index, temperature)
    structured = constraint is not None and constraint.is_json
    if constraint is not None and not structured and constraint.kind != "structural_tag":
        return _constrained(prompt, rng, rates, constraint, greedy=temperature <= 0)
    parsed = parse_prompt(prompt)
    mode = parsed.mode
    if mode is None:
        return _modeless(rng, structured), None
    if structured:
        mode = Mode.CLAIM_LATTICE
    # The question line of the tail layout runs into the turn's end marker.
    question = (parsed.question or "").split("<|im_end|>")[0].strip()
    blocks = _blocks(parsed.blocks)
    claims = _pick_claims(blocks, question, rng, greedy=temperature <= 0)
    rates, cap = follows_reminder(prompt, rates)
    if cap is not None:
        claims = claims[: max(cap, 1)]
    if not claims:
        return _denial(question, structured), "denial"
    failure = _draw_failure(rates, rng, mode, structured)
    if failure == "denial":
        return _denial(question, structured), failure
    if failure == "format_collapse":
        return _collapse(blocks, rng), failure
    if failure == "untagged_prose":
        return _with_untagged(mode, claims, rng), failure
    if failure == "wrong_pointer":
        return _render(mode, _mispoint(claims, blocks, rng), rng), failure
    habit = _real_model_habit(failure, mode, question, claims, blocks, rng)
    if habit is not None:
        return habit, failure
    text = _render(mode, claims, rng)
    if failure == "html_entities":
        return _html_entities(text), failure
    if failure == "broken_json":
        cut = rng.randrange(len(text) // 3, max(len(text) // 3 + 1, len(text) - 2))
        return text[:cut], failure
    return text, None


# Under a grammar a claim longer than this is tried again cut at a word boundary: still
# verbatim, and short enough for the text lengths grammars bound.
GRAMMAR_CLIP_CHARS = 200


def _clip(text: str, most: int) -> str:
    if len(text) <= most:
        return text
    return text[:most].rsplit(" ", 1)[0].rstrip(" ,;:")


def _first_conforming(
    mode: Mode, tries: list[tuple[list[Claim], str | None]], constraint: Constraint
) -> tuple[str, str | None] | None:
    for chosen, failure in tries:
        for k in range(len(chosen), 0, -1):
            for most in (None, GRAMMAR_CLIP_CHARS):
                cut = [replace(c, text=_clip(c.text, most)) if most else c for c in chosen[:k]]
                text = _render(mode, cut, random.Random(0), compact=True)
                if constraint.matches(text):
                    return text, failure
    return None


def _constrained(
    prompt: str, rng: random.Random, rates: BehaviourRates, constraint: Constraint, greedy: bool
) -> tuple[str, str | None]:
    """The answer of a model decoding under a grammar (or regex, or choices): only text the
    constraint admits. Of the failure kinds only a wrong pointer survives (an id the grammar
    allows, on a block that does not say it); collapse, prose, broken JSON, denials and
    the real model's habits cannot be written. Candidates, best first: the answer, its
    claims cut to ``GRAMMAR_CLIP_CHARS``, fewer claims; else the constraint's own
    shortest sentence."""
    parsed = parse_prompt(prompt)
    question = (parsed.question or "").split("<|im_end|>")[0].strip()
    blocks = _blocks(parsed.blocks)
    claims = _pick_claims(blocks, question, rng, greedy=greedy)
    _, cap = follows_reminder(prompt, rates)
    if cap is not None:
        claims = claims[: max(cap, 1)]
    tries: list[tuple[list[Claim], str | None]] = []
    if claims and rng.random() < rates.wrong_pointer:
        tries.append((_mispoint(claims, blocks, rng), "wrong_pointer"))
    tries.append((claims, None))
    if parsed.mode is not None:
        found = _first_conforming(parsed.mode, tries, constraint)
        if found is not None:
            return found
    fallback = constraint.fallback()
    return (fallback if fallback is not None else ""), None


def apply_limits(text: str, stop: list[str], max_tokens: int) -> tuple[str, str, int]:
    """Cut at the first stop string, then at ``max_tokens``; return text, finish reason, tokens."""
    finish = "stop"
    cut = min((i for s in stop if s and (i := text.find(s)) >= 0), default=-1)
    if cut >= 0:
        text = text[:cut]
    spans = list(TOKEN_RE.finditer(text))
    if len(spans) > max_tokens:
        text = text[: spans[max_tokens - 1].end()] if max_tokens > 0 else ""
        return text, "length", max_tokens
    return text, finish, len(spans)


def complete(
    prompt: str,
    *,
    seed: int | None,
    choice_index: int,
    temperature: float,
    max_tokens: int,
    stop: list[str],
    rates: BehaviourRates | None = None,
    constraint: Constraint | None = None,
) -> Completion:
    """One choice as the server returns it: answer, stop strings and max_tokens applied."""
    text, failure = compose_answer(
        prompt,
        seed=seed,
        choice_index=choice_index,
        temperature=temperature,
        rates=rates,
        constraint=constraint,
    )
    text, finish, n_tokens = apply_limits(text, stop, max_tokens)
    return Completion(text=text, finish_reason=finish, completion_tokens=n_tokens, failure=failure)


def aborted(done: Completion) -> Completion:
    """``done`` cut to its first half, as vLLM returns a request it aborted engine-side."""
    spans = list(TOKEN_RE.finditer(done.text))
    keep = len(spans) // 2
    text = done.text[: spans[keep - 1].end()] if keep else ""
    return Completion(
        text=text, finish_reason="abort", completion_tokens=keep, failure=done.failure
    )
