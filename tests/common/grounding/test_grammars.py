"""Each mode's answer grammar: what it admits and what it refuses, read by the simulator's
GBNF reader (the real llama.cpp server reads the same grammars in the contract suite)."""

from __future__ import annotations

import json

import pytest

from qfarm.common.grounding.grammars import answer_grammar, max_claims_for
from qfarm.common.grounding.verify import verify_answer
from qfarm.common.models import Evidence, Mode
from qfarm.common.policy import Policy
from qfarm.ops.sim.grammar import parse_grammar

IDS = ["E1", "E2", "E3"]
CLAIM = "Reykjavik is the capital of Iceland"


def admits(mode: Mode, text: str, *, ids: list[str] = IDS, most: int = 3, per: int = 2) -> bool:
    grammar = answer_grammar(mode, ids, max_claims=most, max_ids_per_claim=per)
    assert grammar is not None
    return parse_grammar(grammar).matches(text)


def test_no_evidence_no_grammar() -> None:
    assert answer_grammar(Mode.QUOTE, [], max_claims=3, max_ids_per_claim=3) is None


def test_the_same_job_gets_the_same_grammar() -> None:
    a = answer_grammar(Mode.CLAIM_LATTICE, IDS, max_claims=4, max_ids_per_claim=3)
    assert a == answer_grammar(Mode.CLAIM_LATTICE, IDS, max_claims=4, max_ids_per_claim=3)


@pytest.mark.parametrize(("text", "ok"), [
    (f'"{CLAIM}" [E1]', True),
    (f'"{CLAIM}" [E1]\n"Iceland is an island in the Atlantic" [E3]', True),
    (f'"{CLAIM}" [E4]', False),  # not a block of the prompt
    (f'"{CLAIM}" [E1, E2]', False),  # a quote names one block
    (f"{CLAIM} [E1]", False),  # no quotation marks
    (f'"{CLAIM}"', False),  # no id
    ('"Reykjavik" [E1]', False),  # under three content words' worth of characters
    ("\n".join([f'"{CLAIM}" [E1]'] * 4), False),  # more quotes than the cap
    (f'The answer: "{CLAIM}" [E1]', False),  # prose around the quote
])  # fmt: skip
def test_quote_lines(text: str, ok: bool) -> None:
    assert admits(Mode.QUOTE, text) is ok


@pytest.mark.parametrize(("text", "ok"), [
    (f"{CLAIM} [E1]", True),
    (f"{CLAIM} [E1, E3]", True),
    (f"{CLAIM} [E1, E2, E3]", False),  # more ids than max_evidence_ids_per_claim
    (f"{CLAIM} [E1]\nIceland is an island in the Atlantic [E2]", True),
    (f"{CLAIM}.", False),  # untagged prose
    (f"{CLAIM} [E1]\nAnd some untagged prose after it.", False),
    (f"{CLAIM} (E1)", False),  # an id outside the contract's spelling
    (f"{CLAIM} [E1] and more", False),
    (f" {CLAIM} [E1]", False),  # a claim starts with a visible character
])  # fmt: skip
def test_pointer_lines(text: str, ok: bool) -> None:
    assert admits(Mode.CLAIM_LATTICE_POINTER, text) is ok


def claims(*items: tuple[str, list[str], str]) -> str:
    return json.dumps({"claims": [{"claim": c, "evidence": e, "warrant": w} for c, e, w in items]})


@pytest.mark.parametrize(("text", "ok"), [
    (claims((CLAIM, ["E1"], "capital and largest city")), True),
    (claims((CLAIM, ["E1", "E2"], "capital and largest city"), (CLAIM, ["E3"], "an island country")), True),
    (claims((CLAIM, ["E7"], "capital and largest city")), False),
    (claims((CLAIM, [], "capital and largest city")), False),
    ('{"claims": []}', False),  # a claim is required: the grammar has no words for a refusal
    (claims((CLAIM, ["E1"], 'a "quoted" word inside it')), True),  # escaped by json.dumps
    (json.dumps({"claims": [{"claim": CLAIM, "evidence_id": "E1"}]}), False),
    (json.dumps({"claims": [{"claim": CLAIM, "evidence": ["E1"], "warrant": "abc def ghi jk"}]},
                indent=2), False),  # the grammar's JSON is one line
])  # fmt: skip
def test_json_object(text: str, ok: bool) -> None:
    assert admits(Mode.CLAIM_LATTICE, text) is ok


def test_the_cap_bounds_the_claims() -> None:
    one = f"{CLAIM} [E1]"
    assert admits(Mode.CLAIM_LATTICE_POINTER, "\n".join([one] * 5), most=5)
    assert not admits(Mode.CLAIM_LATTICE_POINTER, "\n".join([one] * 6), most=5)


def test_an_unenforced_cap_leaves_the_policy_default() -> None:
    assert max_claims_for(12, 5, cap_enforced=False) == 12
    assert max_claims_for(12, 5, cap_enforced=True) == 5
    assert max_claims_for(12, None, cap_enforced=True) == 12


def test_what_the_grammar_admits_the_verifier_reads_as_tagged() -> None:
    """Every form the grammar admits is one the verifier parses as claims with pointers:
    a conforming answer is never FORMAT_COLLAPSED and never unparseable JSON."""
    text = "Reykjavik is the capital and largest city of Iceland."
    ev = [Evidence(id="E1", doc_id="d", chunk_id="d#0", title="Reykjavik", text=text, score=1.0,
                   offset_start=0, offset_end=len(text))]  # fmt: skip
    answers = {
        Mode.QUOTE: f'"{text}" [E1]',
        Mode.CLAIM_LATTICE_POINTER: f"{text} [E1]",
        Mode.CLAIM_LATTICE: claims((text, ["E1"], text)),
    }
    for mode, answer in answers.items():
        assert admits(mode, answer, ids=["E1"])
        result = verify_answer(answer, question="What is the capital of Iceland?", mode=mode,
                               evidence=ev, policy=Policy())
        assert "FORMAT_COLLAPSED" not in result.violation_kinds
        assert result.n_claims == 1 and result.n_verified == 1, (mode, result)


@pytest.mark.parametrize(("grammar", "text", "ok"), [
    ('root ::= "zq"', "zq", True),
    ('root ::= "zq"', "zqzq", False),  # a literal at the end is not repeated
    ('root ::= "a"*', "aaa", True),
    ('root ::= "a"+ "b"?', "", False),
    ("root ::= [a-c]{2,3}", "abc", True),
    ("root ::= [a-c]{2,3}", "abca", False),
    ("root ::= x | y\nx ::= \"x\" # a comment\ny ::= ( \"y\"\n  \"z\" )", "yz", True),
    ('root ::= [^"\\x00-\\x1F]+', 'a"b', False),
])  # fmt: skip
def test_the_simulators_reader(grammar: str, text: str, ok: bool) -> None:
    assert parse_grammar(grammar).matches(text) is ok
