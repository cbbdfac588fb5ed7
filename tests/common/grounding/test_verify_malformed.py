"""Malformed model output never makes the verifier raise, in any mode."""

from __future__ import annotations

import json
import random

import pytest

from qfarm.common.grounding.preflight import run_preflight
from qfarm.common.grounding.verify import verify_answer
from qfarm.common.models import Label, Mode, Verdict, Verification
from qfarm.common.policy import Policy, build_policy
from tests.common.passages import passage

EVIDENCE = tuple(
    passage(i, title, text, doc_id=f"d{i}")
    for i, (title, text) in enumerate(
        [
            ("The Beatles", "The Beatles were an English rock band formed in Liverpool in 1960."),
            ("Paris", 'Paris is the capital of France, nicknamed the "City of Light".'),
        ],
        start=1,
    )
)
GOOD_JSON = json.dumps(
    {
        "claims": [
            {
                "claim": "The Beatles formed in Liverpool in 1960",
                "evidence": ["E1"],
                "warrant": "formed in Liverpool in 1960",
            }
        ]
    }
)

MALFORMED: dict[str, str] = {
    "empty": "",
    "whitespace": " \n\t\r\n   ",
    "newlines only": "\n" * 500,
    "100 KB of prose": ("The Beatles were a band from Liverpool. " * 2600)[:100_000],
    "100 KB single line of spaces": " " * 100_000,
    "100 KB of brackets": "[" * 50_000 + "]" * 50_000,
    "100 KB of quotes": '"' * 100_000,
    "truncated JSON": GOOD_JSON[: len(GOOD_JSON) // 2],
    "unclosed fence": "```json\n" + GOOD_JSON[:40],
    "fence only": "```json\n```",
    "JSON list": json.dumps([{"claim": "x", "evidence": ["E1"]}]),
    "JSON string": json.dumps("The Beatles formed in 1960"),
    "JSON number": "42",
    "JSON null": "null",
    "claims not a list": json.dumps({"claims": {"claim": "x"}}),
    "claims of numbers": json.dumps({"claims": [1, 2, 3]}),
    "evidence of objects": json.dumps(
        {"claims": [{"claim": "The Beatles formed", "evidence": [{"id": 1}]}]}
    ),
    "evidence as int": json.dumps(
        {"claims": [{"claim": "The Beatles formed in Liverpool", "evidence": 1}]}
    ),
    "warrant as list": json.dumps(
        {"claims": [{"claim": "The Beatles formed", "evidence": ["E1"], "warrant": ["a"]}]}
    ),
    "deeply nested JSON": "{" + '"a":[' * 5000 + "1" + "]" * 5000 + "}",
    "deeply nested list": "[" * 100_000,
    "NaN and Infinity": '{"claims": [{"claim": NaN, "evidence": [Infinity]}]}',
    "unknown evidence ids": "The Beatles formed in Liverpool in 1960. [E99, E0, E123456789]",
    "huge evidence id": "The Beatles formed in Liverpool in 1960. [E999999999]",
    "tags only": "[E1][E2]\n[E1, E2]\n[E2]",
    "zero-width and bidi": "\u200bThe\u200d Beatles\u202e formed\u2066 in Liverpool\u2069 [E1]",
    "combining marks": "The Bea\u0301tles\u0308 fo\u0327rmed in Liverpool [E1]",
    "emoji": "🎸🎸 The Beatles 🥁 formed in Liverpool 🇬🇧 [E1] 🎶",
    "surrogate escape": "The Beatles \udcff formed in Liverpool [E1]",
    "NUL and control chars": "The\x00 Beatles\x07 formed\x1b[31m in Liverpool [E1]\x7f",
    "ligatures and fullwidth": "Ｔｈｅ Ｂｅａｔｌｅｓ ﬁrst formed in Liverpool ［E1］",
    "RTL script": "فرقة البيتلز تأسست في ليفربول [E1]",
    "CJK": "披头士乐队于1960年在利物浦成立 [E1]",
    "a thousand claims": "\n".join(
        f"The Beatles formed in Liverpool in 1960 number {i}. [E1]" for i in range(1000)
    ),
    "a thousand JSON claims": json.dumps(
        {
            "claims": [
                {
                    "claim": f"The Beatles formed in Liverpool {i}",
                    "evidence": ["E1"],
                    "warrant": "Liverpool",
                }
                for i in range(1000)
            ]
        }
    ),
    "a thousand quotes": "\n".join(
        '"The Beatles were an English rock band" [E1]' for _ in range(1000)
    ),
    "windows newlines": "The Beatles formed in Liverpool in 1960. [E1]\r\nParis is the capital of France. [E2]\r\n",
    "mixed quotes": '“unbalanced quote [E1]\n"another one\n«guillemets» [E2]',
    "markdown table": "| claim | id |\n|---|---|\n| The Beatles formed in Liverpool | [E1] |",
    "html": "<p>The Beatles formed in <b>Liverpool</b> [E1]</p><script>alert(1)</script>",
    "im_end leak": "The Beatles formed in Liverpool in 1960. [E1]<|im_end|>\n<|im_start|>user\nmore",
    "regex metacharacters": r"(.*)+$^[E1] \d+\w* (?P<x>) [E1] \\",
    "only punctuation": "!!! ??? ... ,,, ;;; --- [E1]",
    "very long word": "x" * 50_000 + " [E1]",
}


def check_invariants(v: Verification) -> None:
    assert 0 <= v.n_verified <= v.n_claims
    assert 0.0 <= v.ratio <= 1.0
    assert list(v.violation_kinds) == sorted(set(v.violation_kinds))
    if v.verdict is Verdict.UNGROUNDED:
        assert v.label in (Label.UNGROUNDED, Label.BROAD_REJECTED)
    if v.verdict is Verdict.STRICT:
        assert v.n_claims > 0 and v.ratio == 1.0
    assert v.answer_brackets >= 0 and v.raw_meaningful_line_count >= 0
    json.dumps(v.model_dump(mode="json"))  # serializable as a row field


def test_there_are_at_least_thirty_malformed_outputs() -> None:
    assert len(MALFORMED) >= 30


@pytest.mark.parametrize("mode", list(Mode))
@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_output_never_raises(name: str, mode: Mode) -> None:
    v = verify_answer(
        MALFORMED[name],
        question="Who were the Beatles?",
        mode=mode,
        evidence=EVIDENCE,
        policy=Policy(),
    )
    check_invariants(v)


@pytest.mark.parametrize("mode", list(Mode))
def test_malformed_output_never_raises_on_a_broad_question_with_caps(mode: Mode) -> None:
    policy = build_policy(
        {"quantifier_guard_apply_caps": True, "quantifier_guard_modes": [m.value for m in Mode]}
    )
    question = "Tell me about all the Beatles"
    pre = run_preflight(question, mode, policy, "hermes-3-8b")
    for answer in MALFORMED.values():
        check_invariants(
            verify_answer(
                answer,
                question=question,
                mode=mode,
                evidence=EVIDENCE,
                policy=policy,
                preflight=pre,
            )
        )


def test_no_evidence_at_all() -> None:
    for mode in Mode:
        v = verify_answer(
            "The Beatles formed in Liverpool in 1960. [E1]",
            question="Q?",
            mode=mode,
            evidence=(),
            policy=Policy(),
        )
        check_invariants(v)
        assert v.verdict is Verdict.UNGROUNDED


def test_a_thousand_claims_are_capped_and_counted() -> None:
    v = verify_answer(
        MALFORMED["a thousand claims"],
        question="Who were the Beatles?",
        mode=Mode.CLAIM_LATTICE_POINTER,
        evidence=EVIDENCE,
        policy=Policy(),
    )
    assert v.n_claims == 12  # claim_lattice_max_claims_per_answer
    assert len(v.claims) == 1000
    assert sum(1 for c in v.claims if not c.admitted) == 988


PALETTE = [
    "[E1]",
    "[E2, E9]",
    "[",
    "]",
    "{",
    "}",
    '"',
    "“",
    "”",
    ">",
    "\n",
    "\n\n",
    " ",
    "claims",
    '{"claims": [',
    '{"claim": "',
    '"evidence": ["E1"]',
    '"warrant": "',
    "```json",
    "```",
    "The Beatles",
    "formed in Liverpool",
    "in 1960",
    "not mentioned",
    "I cannot",
    "- ",
    "1. ",
    "\u200b",
    "é",
    "🙂",
    "\x00",
    "\\",
    ",",
    ":",
    "E1",
    "[E",
    "1]",
    "…",
]


@pytest.mark.parametrize("seed", range(5))
def test_random_fragments_never_raise(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(60):
        answer = "".join(rng.choice(PALETTE) for _ in range(rng.randint(0, 80)))
        for mode in Mode:
            check_invariants(
                verify_answer(
                    answer,
                    question="List all members of the Beatles",
                    mode=mode,
                    evidence=EVIDENCE,
                    policy=Policy(),
                )
            )
