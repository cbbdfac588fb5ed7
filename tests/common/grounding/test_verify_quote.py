"""Quote mode: extraction of quotes and the exact / normalized / fuzzy layers (docs/grounding.md, 'Verification')."""

from __future__ import annotations

import pytest

from qfarm.common.grounding.verify import verify_answer
from qfarm.common.grounding.verify.claims import extract_quotes
from qfarm.common.grounding.verify.quote import best_window_overlap, match_quote
from qfarm.common.models import Evidence, Label, Mode, Verdict, ViolationKind
from qfarm.common.policy import Policy
from tests.common.passages import passage

K = ViolationKind


def make_ev(i: int, title: str, text: str) -> Evidence:
    return passage(i, title, text)


EVIDENCE = (
    make_ev(
        1,
        "Albert Einstein",
        "Albert Einstein was a German-born theoretical physicist best known for developing "
        "the theory of relativity. His mass\u2013energy equivalence formula E = mc2 has been "
        'called "the world\u2019s most famous equation".',
    ),
    make_ev(
        2,
        "Paris",
        'Paris is the capital and largest city of France. Nicknamed the "City of Light", '
        "Paris is a major centre of finance, diplomacy and culture.",
    ),
)
QUESTION = "What is Albert Einstein known for?"


def verify(answer: str, question: str = QUESTION):
    return verify_answer(
        answer, question=question, mode=Mode.QUOTE, evidence=EVIDENCE, policy=Policy()
    )


def test_exact_layer() -> None:
    v = verify('"best known for developing the theory of relativity" [E1]')
    assert v.claims[0].match_layer == "exact"
    assert v.quote_match_layers == {"exact": 1, "normalized": 0, "fuzzy": 0, "unmatched": 0}
    assert (v.verdict, v.label) == (Verdict.STRICT, Label.EVIDENCE_WARRANTED)


def test_normalized_layer_forgives_case_spacing_and_typography() -> None:
    v = verify("\u201cthe WORLD'S  most famous equation\u201d [E1]")
    assert v.claims[0].match_layer == "normalized"
    assert v.claims[0].anchored is True
    assert v.verdict is Verdict.STRICT


def test_fuzzy_layer_at_eighty_percent_in_one_window() -> None:
    # 6 tokens, 5 in one window of the block (one word changed): 5/6 ≥ 0.8
    v = verify('"best known for inventing the theory" [E1]')
    claim = v.claims[0]
    assert claim.match_layer == "fuzzy"
    assert (claim.verified, claim.anchored) == (True, False)
    assert v.verdict is Verdict.STRICT
    assert v.label is Label.ANCHOR_WARRANTED  # a fuzzy quote is verified, not verbatim
    assert K.WARRANT_MISSING not in v.violation_kinds


def test_fuzzy_near_miss_below_eighty_percent_is_unmatched() -> None:
    # 5 tokens, 3 in the block: 0.6
    v = verify('"best known for baking bread" [E1]')
    assert v.claims[0].match_layer == "unmatched"
    assert v.violation_kinds == (K.CITATION_MISMATCH,)
    assert (v.verdict, v.label) == (Verdict.UNGROUNDED, Label.UNGROUNDED)


def test_tokens_scattered_across_the_block_are_not_a_window() -> None:
    # every token occurs in E1, but not within one window of the quote's length
    v = verify('"physicist equation relativity German-born famous" [E1]')
    assert v.claims[0].match_layer == "unmatched"


def test_quote_cited_to_the_wrong_block_is_a_citation_mismatch() -> None:
    v = verify('"Paris is the capital and largest city of France" [E1]')
    assert v.violation_kinds == (K.CITATION_MISMATCH,)


def test_uncited_quote_is_matched_against_every_block() -> None:
    v = verify('"Paris is the capital and largest city of France"', "What is Paris?")
    assert v.claims[0].match_layer == "exact"
    assert v.verdict is Verdict.STRICT


def test_quotes_under_three_tokens_are_ignored() -> None:
    v = verify('"E = mc2" [E1]\n"the theory of relativity" [E1]')
    assert v.n_claims == 1
    assert v.claims[0].text == "the theory of relativity"


def test_quote_with_inner_quotes_is_one_quote() -> None:
    v = verify(
        '"Nicknamed the "City of Light", Paris is a major centre" [E2]', "What is Paris called?"
    )
    assert v.n_claims == 1
    assert v.claims[0].match_layer == "exact"


def test_blockquote_lines_and_ellipses() -> None:
    v = verify(
        '> ...developing the theory of relativity... [E1]\n- "a German-born theoretical physicist" [E1]'
    )
    assert [c.match_layer for c in v.claims] == ["exact", "exact"]


def test_several_quotes_on_one_line_take_the_tags_that_follow_them() -> None:
    ext = extract_quotes('"the theory of relativity" [E1] and "capital and largest city" [E2]')
    assert [(c.text, c.ids) for c in ext.claims] == [
        ("the theory of relativity", ("E1",)),
        ("capital and largest city", ("E2",)),
    ]


def test_tag_before_the_quote_applies_to_it() -> None:
    ext = extract_quotes('[E2] "capital and largest city"')
    assert ext.claims[0].ids == ("E2",)


def test_layer_counts_per_row() -> None:
    answer = "\n".join(
        [
            '"best known for developing the theory of relativity" [E1]',
            '"THE CAPITAL AND LARGEST CITY of France" [E2]',
            '"best known for inventing the theory" [E1]',
            '"a completely invented sentence about cheese" [E1]',
        ]
    )
    v = verify(answer)
    assert v.quote_match_layers == {"exact": 1, "normalized": 1, "fuzzy": 1, "unmatched": 1}
    assert (v.n_claims, v.n_verified, v.verdict) == (4, 3, Verdict.HYBRID)


def test_quote_citing_only_unknown_ids_is_still_looked_up_but_demoted() -> None:
    v = verify('"the theory of relativity" [E7]')
    assert v.claims[0].verified is True
    assert v.violation_kinds == (K.POINTER_OVERFLOW_TRIMMED,)
    assert v.verdict is Verdict.HYBRID


@pytest.mark.parametrize(
    ("quote", "block", "best"),
    [
        (["a", "b", "c"], ["x", "a", "b", "c", "y"], 3),
        (["a", "b", "c"], ["a", "x", "x", "b", "c"], 2),
        (["a", "a"], ["a", "x", "a"], 1),
        (["a", "b", "c"], ["b", "a"], 2),  # block shorter than the quote: the whole block
        (["a"], [], 0),
    ],
)
def test_best_window_overlap(quote: list[str], block: list[str], best: int) -> None:
    assert best_window_overlap(quote, block) == best


def test_match_quote_reports_the_block_it_matched() -> None:
    assert match_quote("capital and largest city", EVIDENCE) == ("exact", "E2")
    assert match_quote("nothing like this at all", EVIDENCE) == (None, None)


@pytest.mark.parametrize(
    ("line", "quotes"),
    [
        ('"a b c" [E1]', ["a b c"]),
        ('"a b c" [E1] and "d e f" [E2]', ["a b c", "d e f"]),
        ('"Nicknamed the "City of Light", Paris" [E2]', ['Nicknamed the "City of Light", Paris']),
        (
            'He wrote "the world\'s best", then "more words here".',
            ["the world's best", "more words here"],
        ),
        (
            "\u201ccurly quotes here\u201d [E1] \u00abguillemets are fine\u00bb",
            ["curly quotes here", "guillemets are fine"],
        ),
        ('"unbalanced quote [E1]', []),
        ('5" tall and 6" wide', []),
    ],
)
def test_quote_spans(line: str, quotes: list[str]) -> None:
    from qfarm.common.grounding.verify.claims import quote_spans

    assert [line[s:e] for s, e in quote_spans(line)] == quotes


def test_prose_without_quotes_is_ungrounded_with_a_no_claims_tail() -> None:
    v = verify(
        "Einstein was a physicist who developed relativity.\nHe won a Nobel Prize.\nHe was German."
    )
    assert (v.verdict, v.n_claims, v.violation_kinds) == (Verdict.UNGROUNDED, 0, ())
    assert v.tails == ("no claims",)


def test_prose_beside_a_verified_quote_is_an_unbacked_claim() -> None:
    # After a real model's answer: one verbatim quote inside a false statement.
    v = verify('Albert Einstein is called "Umm Kulthum", and he is also known for the '
               '"theory of relativity" in the papers.')
    assert v.verdict is Verdict.HYBRID and v.violation_kinds == (ViolationKind.NO_EVIDENCE_POINTER,)
    assert (v.n_claims, v.n_verified) == (2, 1)
    assert sum(v.quote_match_layers.values()) == 1  # the prose is not a quote


def test_short_text_beside_quotes_is_not_a_claim() -> None:
    v = verify('- "developed the theory of relativity" [E1] (see E1)')
    assert v.verdict is Verdict.STRICT and v.n_claims == 1
