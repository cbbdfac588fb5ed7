"""Prompts in Hermes-3 ChatML for the three modes (docs/grounding.md, 'Prompts')."""

from __future__ import annotations

import re

import pytest

from qfarm.common.grounding.preflight import run_preflight
from qfarm.common.grounding.prompts import (
    GROUNDING_REMINDERS,
    IM_END,
    IM_START,
    MODE_MARKERS,
    SYSTEM_PROMPTS,
    build_prompt,
    parse_prompt,
)
from qfarm.common.models import Evidence, Mode
from qfarm.common.policy import Policy, build_policy
from tests.common.passages import passage


def make_ev(i: int, title: str, text: str) -> Evidence:
    return passage(i, title, text, doc_id=f"d{i}")


EVIDENCE = [
    make_ev(1, "The Beatles", "The Beatles were an English rock band formed in Liverpool in 1960."),
    make_ev(2, 'Say "Hello" & <Goodbye>', "A song title with quotes and markup in its title."),
    make_ev(3, "Liverpool", "Liverpool is a city in Merseyside, England."),
]
QUESTION = "Who were the Beatles?"
TURN_RE = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>\n", re.S)


def turns(prompt: str) -> list[tuple[str, str]]:
    return [(m[1], m[2]) for m in TURN_RE.finditer(prompt)]


@pytest.mark.parametrize("mode", list(Mode))
def test_chatml_shape(mode: Mode) -> None:
    text = build_prompt(QUESTION, mode, EVIDENCE, Policy()).text
    assert text.startswith(f"{IM_START}system\n")
    assert text.endswith(f"{IM_START}assistant\n")
    body = text[: -len(f"{IM_START}assistant\n")]
    assert "".join(f"{IM_START}{r}\n{c}{IM_END}\n" for r, c in turns(body)) == body
    assert [r for r, _ in turns(body)] == ["system", "user", "user"]
    assert text.count(IM_START) == text.count(IM_END) + 1


@pytest.mark.parametrize("mode", list(Mode))
def test_system_turn_states_the_modes_contract(mode: Mode) -> None:
    system = turns(build_prompt(QUESTION, mode, EVIDENCE, Policy()).text)[0][1]
    assert system == SYSTEM_PROMPTS[mode]
    assert MODE_MARKERS[mode] in system
    other_markers = [MODE_MARKERS[m] for m in Mode if m is not mode]
    assert not any(marker in system for marker in other_markers)


def test_contract_sentences_name_their_format() -> None:
    assert "[E3]" in SYSTEM_PROMPTS[Mode.QUOTE] and "verbatim" in SYSTEM_PROMPTS[Mode.QUOTE]
    assert "[E2, E5]" in SYSTEM_PROMPTS[Mode.CLAIM_LATTICE_POINTER]
    assert '"warrant"' in SYSTEM_PROMPTS[Mode.CLAIM_LATTICE]
    assert '"claims"' in SYSTEM_PROMPTS[Mode.CLAIM_LATTICE]


@pytest.mark.parametrize("mode", list(Mode))
def test_grounding_reminder_is_the_user_turn_before_the_payload(mode: Mode) -> None:
    ts = turns(build_prompt(QUESTION, mode, EVIDENCE, Policy()).text)
    assert ts[1] == ("user", GROUNDING_REMINDERS[mode])
    assert ts[2][1].startswith("Evidence:")


def test_evidence_ids_in_rank_order_and_titles_escaped() -> None:
    built = build_prompt(QUESTION, Mode.CLAIM_LATTICE_POINTER, EVIDENCE, Policy())
    ids = re.findall(r'<evidence id="(E\d+)"', built.text)
    assert ids == ["E1", "E2", "E3"]
    assert 'title="Say &quot;Hello&quot; &amp; &lt;Goodbye&gt;"' in built.text
    parsed = parse_prompt(built.text)
    assert parsed.mode is Mode.CLAIM_LATTICE_POINTER
    assert [(b[0], b[1]) for b in parsed.blocks] == [(e.id, e.title) for e in EVIDENCE]


def test_parse_prompt_recovers_the_question_exactly() -> None:
    built = build_prompt(QUESTION, Mode.CLAIM_LATTICE_POINTER, EVIDENCE, Policy())
    assert parse_prompt(built.text).question == QUESTION


def test_context_cap_drops_whole_blocks_from_the_tail() -> None:
    cap = len(EVIDENCE[0].text) + len(EVIDENCE[1].text)
    policy = build_policy({"max_context_chars_by_mode": {"quote": cap}})
    built = build_prompt(QUESTION, Mode.QUOTE, EVIDENCE, policy)
    assert [e.id for e in built.evidence] == ["E1", "E2"]
    assert 'id="E3"' not in built.text


def test_no_evidence_says_so() -> None:
    built = build_prompt(QUESTION, Mode.QUOTE, [], Policy())
    assert "(no evidence was retrieved)" in built.text
    assert built.evidence == ()


@pytest.mark.parametrize(
    ("layout", "question_count"), [("tail", 1), ("bookend", 2), ("per_chunk", 3)]
)
def test_payload_layouts(layout: str, question_count: int) -> None:
    policy = build_policy({"user_payload_layout": layout})
    payload = turns(build_prompt(QUESTION, Mode.QUOTE, EVIDENCE, policy).text)[-1][1]
    assert payload.count(f"Question: {QUESTION}") == question_count
    if layout == "tail":
        assert payload.rstrip().endswith(f"Question: {QUESTION}")
    if layout == "bookend":
        assert payload.startswith(f"Question: {QUESTION}")


@pytest.mark.parametrize("mode", [Mode.CLAIM_LATTICE_POINTER, Mode.CLAIM_LATTICE])
def test_quantifier_reminder_placement_in_guarded_modes(mode: Mode) -> None:
    policy = build_policy({"quantifier_reminder_enabled": True})
    question = "List all members of the Beatles"
    pre = run_preflight(question, mode, policy, "hermes-3-8b")
    ts = turns(build_prompt(question, mode, EVIDENCE, policy, pre).text)
    assert [r for r, _ in ts] == ["system", "user", "user", "user"]
    assert ts[1][1] == GROUNDING_REMINDERS[mode]
    assert ts[2][1].startswith("Quantifier reminder:")
    assert "at most 8 claims" in ts[2][1]
    assert ts[3][1].startswith("Evidence:")


def test_no_quantifier_reminder_in_quote_mode_or_when_disabled() -> None:
    question = "List all members of the Beatles"
    on = build_policy({"quantifier_reminder_enabled": True})
    quote = build_prompt(
        question, Mode.QUOTE, EVIDENCE, on, run_preflight(question, Mode.QUOTE, on, "default")
    )
    assert "Quantifier reminder" not in quote.text
    off = Policy()
    mode = Mode.CLAIM_LATTICE_POINTER
    pointer = build_prompt(
        question, mode, EVIDENCE, off, run_preflight(question, mode, off, "default")
    )
    assert "Quantifier reminder" not in pointer.text


@pytest.mark.parametrize(
    ("question", "mode"),
    [
        ("List all members of the Beatles", Mode.CLAIM_LATTICE_POINTER),  # bounded template
        ("Tell me about the Roman Empire", Mode.CLAIM_LATTICE_POINTER),  # unbounded template
        ("Tell me about the Roman Empire", Mode.CLAIM_LATTICE),
    ],
)
def test_the_reminder_asks_for_fewer_grounded_claims(question: str, mode: Mode) -> None:
    from qfarm.common.grounding.reminders import render_quantifier_reminder

    policy = build_policy({"quantifier_reminder_enabled": True})
    reminder = render_quantifier_reminder(
        mode, policy, run_preflight(question, mode, policy, "hermes-3-8b")
    )
    assert reminder is not None
    assert "Fewer claims, each grounded in the evidence, are better than a longer list" in reminder
    assert re.search(r"at most \d+ claims", reminder)  # the cap (and the simulator's cue) stays


def test_the_evidence_map_is_capped_with_the_claim_cap_when_caps_are_enforced() -> None:
    """The preflight contract's evidence clause: a broad answer capped at N claims sees at
    most N blocks (docs/grounding.md, 'Preflight, reject-broad, allow-broad', decision 7)."""
    many = [make_ev(i, f"Song {i}", f"Song {i} is a song about rain, released in 19{60 + i}.")
            for i in range(1, 9)]  # fmt: skip
    question = "Name a few songs about rain."  # FEW: cap 5 on hermes-3-8b
    mode = Mode.CLAIM_LATTICE_POINTER
    for policy, shown in (
        (build_policy({"quantifier_guard_apply_caps": True}), 8),  # FEW is not broad
        (build_policy({}), 8),
    ):
        pre = run_preflight(question, mode, policy, "hermes-3-8b")
        assert len(build_prompt(question, mode, many, policy, pre).evidence) == shown
    broad = "List all the songs about rain."  # ALL, unbounded: cap 8 on hermes-3-8b, 4 on small-local
    on = build_policy({"quantifier_guard_apply_caps": True})
    pre = run_preflight(broad, mode, on, "small-local")
    assert pre.claim_cap == 4
    built = build_prompt(broad, mode, many, on, pre)
    assert [e.id for e in built.evidence] == ["E1", "E2", "E3", "E4"]
    assert "[E5]" not in built.text and 'id="E5"' not in built.text
    # the dry run changes nothing: caps off, every block is shown
    off = build_policy({})
    assert len(build_prompt(broad, mode, many, off,
                            run_preflight(broad, mode, off, "small-local")).evidence) == 8  # fmt: skip


def test_the_bounded_reminder_has_no_training_prior_clause() -> None:
    policy = build_policy({"quantifier_reminder_enabled": True})
    mode = Mode.CLAIM_LATTICE_POINTER
    bounded = "List all members of the Beatles."
    text = build_prompt(bounded, mode, EVIDENCE, policy,
                        run_preflight(bounded, mode, policy, "hermes-3-8b")).text  # fmt: skip
    assert "finite, known set" in text and "memory" not in text and "training" not in text
    unbounded = "List all the songs about rain."
    text = build_prompt(unbounded, mode, EVIDENCE, policy,
                        run_preflight(unbounded, mode, policy, "hermes-3-8b")).text  # fmt: skip
    assert "not from what you remember from training" in text


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_evidence_first_shares_a_questions_evidence_across_modes_and_keeps_every_turn() -> None:
    """``prompt_order=evidence_first``: every mode's prompt for a question opens alike up to
    the end of the evidence and question (what a server's prefix cache can reuse), and
    carries the same turns' words as the default order, only moved."""
    first = build_policy({"prompt_order": "evidence_first"})
    prompts = {m: build_prompt(QUESTION, m, EVIDENCE, first).text for m in Mode}
    payload_end = min(p.index(f"Question: {QUESTION}") + len(f"Question: {QUESTION}")
                      for p in prompts.values())  # fmt: skip
    a, b, c = prompts.values()
    assert min(_common_prefix(a, b), _common_prefix(a, c)) >= payload_end
    for mode, prompt in prompts.items():
        default = build_prompt(QUESTION, mode, EVIDENCE, Policy()).text
        assert _common_prefix(prompt, build_prompt(QUESTION, Mode.QUOTE, EVIDENCE, Policy()).text) < payload_end
        words = sorted(" ".join(text for _, text in turns(default)).split())
        assert sorted(" ".join(text for _, text in turns(prompt)).split()) == words
        assert [role for role, _ in turns(prompt)][:2] == ["system", "user"]
        parsed = parse_prompt(prompt)  # what the simulator reads: mode, question, blocks
        assert (parsed.mode, parsed.question, len(parsed.blocks)) == (mode, QUESTION, 3)
        assert prompt.endswith(f"{IM_START}assistant\n")


def test_the_default_order_keeps_the_hashes_runs_had_before_the_switch() -> None:
    from qfarm.common import policy as policy_module

    seen: list[dict] = []
    real = policy_module._digest
    try:
        policy_module._digest = lambda p: seen.append(p) or real(p)  # type: ignore[assignment]
        policy_module._verifier_policy_hash(Policy())
        policy_module._governance_policy_hash(Policy())
        policy_module._verifier_policy_hash(build_policy({"prompt_order": "evidence_first"}))
    finally:
        policy_module._digest = real  # type: ignore[assignment]
    assert "prompt_order" not in seen[0] and "prompt_order" not in seen[1]
    assert seen[2]["prompt_order"] == "evidence_first"
