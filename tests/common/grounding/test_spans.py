"""Matched spans: the verifier's token rules mapped back to character offsets of the evidence."""

from __future__ import annotations

import pytest

from qfarm.common.grounding.verify import verify_answer
from qfarm.common.grounding.verify.spans import claim_spans, word_tokens
from qfarm.common.grounding.verify.text import tokens
from qfarm.common.models import Claim, Evidence
from qfarm.common.policy import build_policy
from qfarm.common.vocab import Mode

TEXT = ("The Seine is a river in northern France. The Seine flows through Paris and into the "
        "English Channel at Le Havre. Einstein's “theory” — mass-energy (E=mc²)… ¡Olé! 777 km.")


def block(eid: str, text: str, title: str = "Seine") -> Evidence:
    return Evidence(id=eid, doc_id=eid, chunk_id=f"{eid}#0", title=title, text=text, score=1.0,
                    offset_start=0, offset_end=len(text))


@pytest.mark.parametrize("text", [
    TEXT,
    "  leading and trailing  ",
    "Ünïcödé ﬁle ＦＵＬＬ width, soft\u00adhyphen, zero\u200bwidth",
    '"quoted," (parenthesised) [E1] — dashes – and ‘curly’ quotes',
    "",
])
def test_word_tokens_are_the_verifier_tokens(text: str) -> None:
    found = word_tokens(text)
    assert [t.text for t in found] == tokens(text)
    for t in found:  # each span is a raw word holding the token, edge punctuation trimmed
        raw = text[t.start:t.end]
        assert t.text in tokens(raw) and raw == raw.strip()


def spans_of(answer: str, mode: Mode, blocks: list[Evidence]) -> list[list[tuple[str, str, str]]]:
    ver = verify_answer(answer, question="Which river flows through Paris?", mode=mode,
                        evidence=blocks, policy=build_policy({}))
    by_id = {b.id: b for b in blocks}
    return [[(s.evidence_id, s.how, by_id[s.evidence_id].text[s.start:s.end])
             for s in claim_spans(c, by_id, mode=mode)] for c in ver.claims]


OTHER = block("E1", "Mount Everest is the highest mountain on Earth.", "Mount Everest")
SEINE = block("E2", TEXT)


def test_quote_spans_follow_the_layer_that_matched() -> None:
    exact = '"The Seine flows through Paris" [E2]'
    normalized = '"the seine flows through PARIS and into the english channel" [E2]'
    fuzzy = '"The Seine flows into Paris and through the English Channel" [E2]'
    got = spans_of("\n".join((exact, normalized, fuzzy)), Mode.QUOTE, [OTHER, SEINE])
    assert got == [
        [("E2", "exact", "The Seine flows through Paris")],
        [("E2", "normalized", "The Seine flows through Paris and into the English Channel")],
        [("E2", "fuzzy", "The Seine flows through Paris and into the English Channel")],
    ]


def test_pointer_spans_are_the_merged_anchor_runs_in_the_cited_block() -> None:
    answer = ("The Seine flows through Paris and into the English Channel. [E2]\n"
              "Paris sits where the Seine and the Channel meet, in France. [E2]")
    got = spans_of(answer, Mode.CLAIM_LATTICE_POINTER, [OTHER, SEINE])
    assert got[0] == [("E2", "anchor", "The Seine flows through Paris and into the English Channel")]
    # verified on shared content words, no 4-token run in common: the words themselves
    assert {how for _, how, _ in got[1]} == {"shared"}
    assert {text for _, _, text in got[1]} == {"Seine", "France", "Paris", "Channel"}


def test_json_spans_are_the_warrant_and_an_unverified_claim_shows_what_it_shares() -> None:
    answer = ('{"claims": [{"claim": "The Seine flows through Paris.", "evidence": ["E2"], '
              '"warrant": "flows through Paris and into the English Channel"}, '
              '{"claim": "Mount Everest lies in Vienna, Budapest and Belgrade.", '
              '"evidence": ["E1"], "warrant": "Everest"}]}')
    got = spans_of(answer, Mode.CLAIM_LATTICE, [OTHER, SEINE])
    assert got[0] == [("E2", "warrant", "flows through Paris and into the English Channel")]
    assert got[1] == [("E1", "shared", "Mount"), ("E1", "shared", "Everest")]


def test_claims_past_the_cap_have_no_spans() -> None:
    claim = Claim(text="The Seine flows through Paris", evidence_ids=("E2",), admitted=False)
    assert claim_spans(claim, {"E2": SEINE}, mode=Mode.QUOTE) == []
