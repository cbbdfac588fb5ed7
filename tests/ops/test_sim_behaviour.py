"""The simulator's answer generation (pure): formats, failure modes, determinism."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from qfarm.common.grounding.prompts import build_prompt
from qfarm.common.models import Evidence, Mode
from qfarm.common.policy import Policy
from qfarm.ops.sim.behaviour import (
    PROFILES,
    BehaviourRates,
    apply_limits,
    complete,
    compose_answer,
    count_tokens,
    split_sentences,
)
from qfarm.ops.sim.constraints import Constraint

TEXTS = {
    "The Beatles": (
        "The Beatles were an English rock band formed in Liverpool in 1960. The core lineup of "
        "the band comprised John Lennon, Paul McCartney, George Harrison and Ringo Starr. They "
        "are widely regarded as the most influential band of all time."
    ),
    "Liverpool": (
        "Liverpool is a city and metropolitan borough in Merseyside, England. It is known for its "
        "maritime history and its football clubs. The city has a population of about 500,000 people."
    ),
    "Abbey Road": (
        "Abbey Road is the eleventh studio album by the Beatles, released in September 1969. It was "
        "the last album the group recorded together before their break-up in 1970."
    ),
}
QUESTION = "Who were the members of the Beatles?"
TAG_RE = re.compile(r"\[(E\d+(?:,\s*E\d+)*)\]")


def make_evidence() -> list[Evidence]:
    return [
        Evidence(
            id=f"E{i}",
            doc_id=f"d{i}",
            chunk_id=f"d{i}-0",
            title=title,
            text=text,
            score=10.0 - i,
            offset_start=0,
            offset_end=len(text),
        )
        for i, (title, text) in enumerate(TEXTS.items(), start=1)
    ]


def make_prompt(
    mode: Mode, question: str = QUESTION, evidence: list[Evidence] | None = None
) -> str:
    ev = make_evidence() if evidence is None else evidence
    return build_prompt(question, mode, ev, Policy()).text


BLOCKS = {e.id: e.text for e in make_evidence()}
CLEAN = PROFILES["clean"]


def only(kind: str) -> BehaviourRates:
    return BehaviourRates(**{kind: 1.0})


# --------------------------------------------------------------------------- good answers


@pytest.mark.parametrize("seed", range(12))
def test_clean_quote_answers_quote_their_cited_block_verbatim(seed: int) -> None:
    text, failure = compose_answer(make_prompt(Mode.QUOTE), seed=seed, rates=CLEAN)
    assert failure is None
    lines = text.splitlines()
    assert lines
    for line in lines:
        m = re.fullmatch(r'"(?P<q>[^"]+)" \[(?P<id>E\d)\]', line)
        assert m, line
        assert m["q"] in BLOCKS[m["id"]]


@pytest.mark.parametrize("seed", range(12))
def test_clean_pointer_answers_copy_their_cited_block(seed: int) -> None:
    text, _ = compose_answer(make_prompt(Mode.CLAIM_LATTICE_POINTER), seed=seed, rates=CLEAN)
    for line in text.splitlines():
        body = line.removeprefix("- ")
        m = re.fullmatch(r"(?P<claim>.+) \[(?P<id>E\d)\]", body)
        assert m, line
        # The whole claim is a verbatim run of the block: far more than 4 shared tokens.
        assert m["claim"] in BLOCKS[m["id"]]
        assert len(m["claim"].split()) >= 5


@pytest.mark.parametrize("seed", range(12))
def test_clean_json_answers_have_verbatim_warrants(seed: int) -> None:
    text, _ = compose_answer(make_prompt(Mode.CLAIM_LATTICE), seed=seed, rates=CLEAN)
    payload = json.loads(text)
    assert payload["claims"]
    for claim in payload["claims"]:
        assert set(claim) == {"claim", "evidence", "warrant"}
        (eid,) = claim["evidence"]
        assert claim["warrant"] in BLOCKS[eid]
        assert claim["warrant"] in claim["claim"]


def test_answers_prefer_blocks_about_the_question() -> None:
    picked = Counter()
    for seed in range(40):
        text, _ = compose_answer(make_prompt(Mode.QUOTE), seed=seed, rates=CLEAN)
        picked.update(TAG_RE.findall(text))
    # E1 ("The Beatles") shares the most words with the question.
    assert picked["E1"] == max(picked.values())


# --------------------------------------------------------------------------- failure modes


def test_format_collapse_is_prose_without_tags() -> None:
    for mode in Mode:
        text, failure = compose_answer(make_prompt(mode), seed=1, rates=only("format_collapse"))
        assert failure == "format_collapse"
        lines = [ln for ln in text.splitlines() if len(ln) > 20]
        assert len(lines) >= 3
        assert not TAG_RE.search(text) and '"' not in text
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)


def test_untagged_prose_adds_an_unsupported_line() -> None:
    text, failure = compose_answer(
        make_prompt(Mode.CLAIM_LATTICE_POINTER), seed=2, rates=only("untagged_prose")
    )
    assert failure == "untagged_prose"
    lines = text.splitlines()
    assert TAG_RE.search(lines[0]) and not TAG_RE.search(lines[-1])
    assert all(lines[-1] not in block for block in BLOCKS.values())


def test_wrong_pointer_cites_a_block_without_the_claim() -> None:
    for seed in range(10):
        text, failure = compose_answer(
            make_prompt(Mode.CLAIM_LATTICE_POINTER), seed=seed, rates=only("wrong_pointer")
        )
        assert failure == "wrong_pointer"
        wrong = []
        for line in text.splitlines():
            m = re.fullmatch(r"(?:- )?(?P<claim>.+) \[(?P<id>E\d+)\]", line)
            assert m
            if m["claim"] not in BLOCKS.get(m["id"], ""):
                wrong.append(line)
        assert len(wrong) == 1


def test_denial_denies_present_evidence() -> None:
    text, failure = compose_answer(make_prompt(Mode.QUOTE), seed=3, rates=only("denial"))
    assert failure == "denial"
    assert text == "The provided evidence does not mention the members of the Beatles."


def test_broken_json_does_not_parse_and_only_hits_json_mode() -> None:
    text, failure = compose_answer(
        make_prompt(Mode.CLAIM_LATTICE), seed=4, rates=only("broken_json")
    )
    assert failure == "broken_json"
    assert text.startswith("{")
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    _, failure = compose_answer(make_prompt(Mode.QUOTE), seed=4, rates=only("broken_json"))
    assert failure is None


def test_structured_output_always_parses() -> None:
    for kind in ("format_collapse", "broken_json", "denial"):
        text, _ = compose_answer(
            make_prompt(Mode.CLAIM_LATTICE), seed=5, rates=only(kind), constraint=Constraint("json")
        )
        assert isinstance(json.loads(text)["claims"], list)


def test_no_evidence_gives_a_denial() -> None:
    text, failure = compose_answer(make_prompt(Mode.QUOTE, evidence=[]), seed=0, rates=CLEAN)
    assert failure == "denial" and "does not mention" in text


def test_default_profile_mixes_good_and_each_failure() -> None:
    seen: Counter[str | None] = Counter()
    for mode in Mode:
        prompt = make_prompt(mode)
        for seed in range(150):
            seen[compose_answer(prompt, seed=seed)[1]] += 1
    assert set(seen) == {
        None,
        "format_collapse",
        "untagged_prose",
        "wrong_pointer",
        "denial",
        "broken_json",
    }
    assert seen[None] > sum(v for k, v in seen.items() if k is not None)


def test_all_three_verdicts_occur_under_the_verifier() -> None:
    verify = pytest.importorskip("qfarm.common.grounding.verify")
    if not hasattr(verify, "verify_answer"):
        pytest.skip("qfarm.common.grounding.verify.verify_answer is not written yet")
    verdicts = Counter()
    evidence = make_evidence()
    for mode in Mode:
        prompt = make_prompt(mode)
        for seed in range(40):
            text, failure = compose_answer(prompt, seed=seed)
            result = verify.verify_answer(
                text, question=QUESTION, mode=mode, evidence=evidence, policy=Policy()
            )
            verdicts[result.verdict.value] += 1
            if failure in ("format_collapse", "denial", "broken_json"):
                assert result.verdict.value == "UNGROUNDED", (mode, failure, text)
            if failure is None:
                assert result.n_verified == result.n_claims > 0, (mode, text)
    assert set(verdicts) == {"STRICT", "HYBRID", "UNGROUNDED"}


# --------------------------------------------------------------------------- determinism and limits


def test_same_prompt_and_seed_give_the_same_answer() -> None:
    prompt = make_prompt(Mode.CLAIM_LATTICE)
    a = [compose_answer(prompt, seed=s, choice_index=0) for s in range(20)]
    b = [compose_answer(prompt, seed=s, choice_index=0) for s in range(20)]
    assert a == b
    assert len({t for t, _ in a}) > 3  # and seeds do change it


def test_greedy_ignores_seed_and_choice() -> None:
    prompt = make_prompt(Mode.QUOTE)
    outs = {
        compose_answer(prompt, seed=s, choice_index=j, temperature=0.0)
        for s in range(5)
        for j in range(3)
    }
    assert len(outs) == 1


def test_rates_are_validated() -> None:
    with pytest.raises(ValueError, match="sum to at most 1"):
        BehaviourRates(denial=0.7, wrong_pointer=0.6)
    with pytest.raises(ValueError, match="unknown behaviour rate"):
        CLEAN.with_overrides(hallucination=0.1)


def test_stop_and_max_tokens() -> None:
    assert apply_limits("one two<|im_end|>three", ["<|im_end|>"], 100) == ("one two", "stop", 2)
    text, reason, n = apply_limits("a b c d e f", [], 3)
    assert (text, reason, n) == ("a b c", "length", 3)
    c = complete(
        make_prompt(Mode.QUOTE),
        seed=0,
        choice_index=0,
        temperature=0.7,
        max_tokens=5,
        stop=[],
        rates=CLEAN,
    )
    assert c.finish_reason == "length" and c.completion_tokens == 5 == count_tokens(c.text)


def test_sentences_are_safe_to_quote() -> None:
    out = split_sentences(
        'He said "hi" to them all today. A [note] is here in this one. Plain words are fine here.'
    )
    assert out == ("Plain words are fine here.",)


def test_a_prompt_with_the_quantifier_reminder_is_heeded() -> None:
    from qfarm.ops.sim.behaviour import PROFILES, follows_reminder

    rates = PROFILES["small-model"]
    plain, cap = follows_reminder("no reminder here", rates)
    assert plain == rates and cap is None
    prompt = (
        "<|im_start|>user\nQuantifier reminder: no natural bound. Give at most 5 claims.<|im_end|>"
    )
    heeded, cap = follows_reminder(prompt, rates)
    assert cap == 5
    assert heeded.format_collapse == rates.format_collapse / 2
    assert heeded.untagged_prose == rates.untagged_prose / 2
    assert heeded.denial == rates.denial


# --------------------------------------------------------------------------- a real model's habits
# What SmolLM2-135M wrote in the committed real-model run, reproducible on demand
# (docs/llm.md, 'What a real model wrote'); every profile leaves these at 0.

REAL_HABITS = ("paraphrase", "question_echo", "bare_pointer", "runaway", "partial_denial",
               "html_entities", "repetition")
APOSTROPHE_TEXTS = {
    "The Beatles": (
        "The Beatles were an English rock band formed in Liverpool in 1960. The Beatles' members "
        "were John Lennon, Paul McCartney, George Harrison and Ringo Starr."
    ),
}


def verify_text(text: str, mode: Mode, evidence: list[Evidence] | None = None):  # noqa: ANN201
    from qfarm.common.grounding.verify import verify_answer

    return verify_answer(text, question=QUESTION, mode=mode,
                         evidence=evidence or make_evidence(), policy=Policy())


def test_no_profile_draws_a_real_model_habit() -> None:
    for profile in PROFILES.values():
        assert all(getattr(profile, kind) == 0.0 for kind in REAL_HABITS)
    seen = {compose_answer(make_prompt(m), seed=s)[1] for m in Mode for s in range(60)}
    assert not seen & set(REAL_HABITS)


def test_paraphrase_is_one_untagged_line_in_every_mode() -> None:
    for mode in Mode:
        for seed in range(6):
            text, failure = compose_answer(make_prompt(mode), seed=seed, rates=only("paraphrase"))
            assert failure == "paraphrase"
            assert len(text.splitlines()) == 1
            assert not TAG_RE.search(text) and '"' not in text and "{" not in text
            assert verify_text(text, mode).verdict.value == "UNGROUNDED"


def test_question_echo_writes_the_question_back() -> None:
    for mode in Mode:
        text, failure = compose_answer(make_prompt(mode), seed=0, rates=only("question_echo"))
        assert (text, failure) == (QUESTION, "question_echo")


def test_bare_pointer_spells_ids_outside_the_contract() -> None:
    spelled = set()
    for seed in range(12):
        text, _ = compose_answer(make_prompt(Mode.CLAIM_LATTICE_POINTER), seed=seed,
                                 rates=only("bare_pointer"))
        assert not TAG_RE.search(text) and re.search(r"\bE\d\b", text)
        spelled |= {m for m in ("(E", "(evidence E", 'evidence "E') if m in text}
        assert verify_text(text, Mode.CLAIM_LATTICE_POINTER).verdict.value == "UNGROUNDED"
    assert spelled == {"(E", "(evidence E", 'evidence "E'}
    text, _ = compose_answer(make_prompt(Mode.CLAIM_LATTICE), seed=1, rates=only("bare_pointer"))
    items = json.loads(text)["claims"]
    assert all("evidence_id" in i and "evidence" not in i for i in items)
    assert verify_text(text, Mode.CLAIM_LATTICE).verdict.value == "UNGROUNDED"
    # A verbatim quote is still verbatim: quote mode searches every block for it.
    text, _ = compose_answer(make_prompt(Mode.QUOTE), seed=1, rates=only("bare_pointer"))
    assert re.search(r'" \(E\d\)$', text.splitlines()[0])
    assert verify_text(text, Mode.QUOTE).n_verified >= 1


def test_runaway_runs_into_max_tokens() -> None:
    for mode in Mode:
        done = complete(make_prompt(mode), seed=2, choice_index=0, temperature=0.7,
                        max_tokens=160, stop=["<|im_end|>"], rates=only("runaway"))
        assert done.failure == "runaway"
        assert done.finish_reason == "length" and done.completion_tokens == 160


def test_repetition_writes_a_line_twice() -> None:
    for mode in Mode:
        text, failure = compose_answer(make_prompt(mode), seed=2, rates=only("repetition"))
        assert failure == "repetition"
        lines = text.splitlines()
        assert lines[-1] in lines[:-1] or lines[-1] in text[: -len(lines[-1])]
    text, _ = compose_answer(make_prompt(Mode.CLAIM_LATTICE_POINTER), seed=2,
                             rates=only("repetition"))
    result = verify_text(text, Mode.CLAIM_LATTICE_POINTER)
    assert result.n_claims == len(text.splitlines()) and result.n_verified == result.n_claims


def test_runaway_is_untagged_prose_in_paragraphs() -> None:
    text, _ = compose_answer(make_prompt(Mode.CLAIM_LATTICE_POINTER), seed=3,
                             rates=only("runaway"))
    assert "\n\n" in text and not TAG_RE.search(text)
    assert count_tokens(text) >= 4096


def test_partial_denial_answers_then_denies_a_side_detail() -> None:
    text, failure = compose_answer(make_prompt(Mode.CLAIM_LATTICE), seed=4,
                                   rates=only("partial_denial"))
    assert failure == "partial_denial"
    head, tail = text.split(", but ", 1)
    assert any(head.split()[0] in b for b in BLOCKS.values())
    assert tail.startswith("the evidence does not specify the members of the Beatles")
    kinds = verify_text(text, Mode.CLAIM_LATTICE).violation_kinds
    assert "DEFLECTION_DETECTED" not in kinds and "SCHEMA_INVALID" in kinds


def test_html_entities_escape_apostrophes_of_a_good_answer() -> None:
    evidence = [Evidence(id="E1", doc_id="d1", chunk_id="d1-0", title="The Beatles",
                         text=APOSTROPHE_TEXTS["The Beatles"], score=1.0, offset_start=0,
                         offset_end=len(APOSTROPHE_TEXTS["The Beatles"]))]
    prompt = make_prompt(Mode.QUOTE, evidence=evidence)
    for seed in range(8):
        good, _ = compose_answer(prompt, seed=seed, rates=CLEAN)
        text, failure = compose_answer(prompt, seed=seed, rates=only("html_entities"))
        assert failure == "html_entities"
        assert text == good.replace("'", "&#x27;")
        if "'" in good:
            break
    else:
        pytest.fail("no seed picked the sentence with an apostrophe")


def test_structured_output_has_no_prose_habit() -> None:
    for kind in ("paraphrase", "question_echo", "bare_pointer", "runaway", "partial_denial",
                 "repetition"):
        text, failure = compose_answer(make_prompt(Mode.CLAIM_LATTICE), seed=5, rates=only(kind),
                                       constraint=Constraint("json"))
        assert failure is None
        assert isinstance(json.loads(text)["claims"], list)
