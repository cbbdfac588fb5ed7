"""Gold-answer matching: normalization, several gold answers, evidence vs claims."""

from __future__ import annotations

import sys
import unicodedata

from qfarm.common.grounding.gold import DASHES, match_gold, normalize_tokens
from qfarm.common.models import Claim, Evidence


def ev(text: str, eid: str = "E1") -> Evidence:
    return Evidence(
        id=eid,
        doc_id="d",
        chunk_id="d#0",
        title="T",
        text=text,
        score=1.0,
        offset_start=0,
        offset_end=len(text),
    )


def test_normalization_folds_case_width_punctuation_and_articles() -> None:
    assert normalize_tokens("“The Beatles”,  (1960) ＰＡＲＩＳ!") == ("beatles", "1960", "paris")
    assert normalize_tokens("rock-and-roll, China–Nepal") == (
        "rock",
        "and",
        "roll",
        "china",
        "nepal",
    )
    assert normalize_tokens("Seurat's and Picasso’s works") == ("seurat", "and", "picasso", "works")
    assert normalize_tokens("U.S. 8,848.86") == ("u.s", "8,848.86")  # inner punctuation stays
    assert normalize_tokens("  ...  ") == ()


def test_match_in_claims_ignores_case_and_punctuation() -> None:
    claims = [Claim(text="It was written by WILLIAM SHAKESPEARE. [E1]", evidence_ids=("E1",))]
    assert match_gold(["William Shakespeare"], claims, [ev("Hamlet is a tragedy.")]) == (
        True,
        False,
    )


def test_any_of_several_gold_answers_matches() -> None:
    claims = [Claim(text="The capital is Edo, today called Tokyo", evidence_ids=("E1",))]
    assert match_gold(["Kyoto", "Tokyo"], claims, [ev("Tokyo is the capital of Japan.")]) == (
        True,
        True,
    )
    assert match_gold(["Kyoto", "Osaka"], claims, [ev("Tokyo is the capital of Japan.")]) == (
        False,
        False,
    )


def test_answer_in_evidence_but_not_in_claims() -> None:
    claims = [Claim(text="The evidence does not say who painted it.", evidence_ids=())]
    evidence = [
        ev("An unrelated block.", "E1"),
        ev("The Mona Lisa was painted by Leonardo da Vinci.", "E2"),
    ]
    assert match_gold(["Leonardo da Vinci"], claims, evidence) == (False, True)


def test_match_respects_token_boundaries() -> None:
    claims = [Claim(text="A Parisian landmark", evidence_ids=("E1",))]
    assert match_gold(["Paris"], claims, [ev("Parisian cafés")]) == (False, False)
    assert match_gold(["1969"], [Claim(text="in 1969, the landing")], [ev("19690")]) == (
        True,
        False,
    )


def test_articles_do_not_block_a_match() -> None:
    claims = [Claim(text="Lennon founded Beatles", evidence_ids=("E1",))]
    assert match_gold(["The Beatles"], claims, [ev("the band the Beatles")]) == (True, True)


def test_warrant_counts_and_unadmitted_claims_do_not() -> None:
    warranted = [
        Claim(
            text="The author is named in E1", warrant="written by Jane Austen", evidence_ids=("E1",)
        )
    ]
    assert match_gold(["Jane Austen"], warranted, []) == (True, False)
    excess = [Claim(text="Jane Austen wrote it", admitted=False)]
    assert match_gold(["Jane Austen"], excess, []) == (False, False)


def test_no_usable_answers_gives_none() -> None:
    claims = [Claim(text="anything")]
    assert match_gold([], claims, [ev("anything")]) == (None, None)
    assert match_gold(["the", "  "], claims, [ev("the")]) == (None, None)


def test_no_claims_is_false_not_none() -> None:
    assert match_gold(["Mars"], [], [ev("Mars is the fourth planet.")]) == (False, True)


def test_the_dash_table_holds_every_dash_of_this_pythons_unicode() -> None:
    dashes = {chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Pd"}
    missing = sorted(f"U+{ord(ch):04X}" for ch in dashes - set(DASHES))
    assert not missing, f"add {missing} to gold.DASHES (Unicode {unicodedata.unidata_version})"
    # Entries from a newer Unicode than this Python's are unassigned here, never another category.
    assert {unicodedata.category(ch) for ch in set(DASHES) - dashes} <= {"Cn"}
    assert normalize_tokens("China\u2013Nepal mid\u20102061 x\uff0dy") == (
        "china", "nepal", "mid", "2061", "x", "y")


def test_no_letter_or_digit_is_punctuation_or_a_symbol_in_this_pythons_unicode() -> None:
    """``normalize_tokens`` strips nothing from a word with a letter or digit at each end;
    that holds only while no such character is in a P or S category."""
    both = [hex(c) for c in range(sys.maxunicode + 1)
            if chr(c).isalnum() and unicodedata.category(chr(c))[0] in "PS"]  # fmt: skip
    assert both == []


def _tokens_char_by_char(text: str) -> tuple[str, ...]:
    """The tokens as the rules state them, every edge character's category looked up."""

    def strip(token: str) -> str:
        while token and unicodedata.category(token[0])[0] in "PS":
            token = token[1:]
        while token and unicodedata.category(token[-1])[0] in "PS":
            token = token[:-1]
        return token

    out = []
    for raw in "".join(" " if unicodedata.category(ch) == "Pd" else ch
                       for ch in unicodedata.normalize("NFKC", text).casefold()).split():  # fmt: skip
        token = strip(raw)
        if token.endswith(("'s", "\u2019s")):
            token = strip(token[:-2])
        if token and token not in ("a", "an", "the"):
            out.append(token)
    return tuple(out)


def test_tokens_are_those_of_the_rules_on_awkward_words() -> None:
    texts = [
        "The Beatles' songs, (1960s) and Seurat's \u201cLa Grande Jatte\u201d.",
        "_under_ score__ $100 \u00a3 5% #1 +/- \u00bd \u2153 x\u00b2 \u2460 \u0663\u0664",
        "caf\u00e9 cafe\u0301 \u0301accent e\u0301's 's 's's \u2019s it\u2019s'",
        "\u0915\u093f \u4e00\u4e8c \u3280 \uff10\uff11 \u2167 \u00e6sop \u0130stanbul \ufb01ne",
        "... -- \u2014 \u00ab\u00bb a an the THE An \u200b zero\u200bwidth",
    ]
    for text in texts:
        assert normalize_tokens(text) == _tokens_char_by_char(text), text
