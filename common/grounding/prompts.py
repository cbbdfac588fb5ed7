"""Prompt building for the three modes, in Hermes-3 ChatML (docs/grounding.md, 'Prompts').

Turns, in order: system (the mode's output contract), user (grounding
reminder: the contract in one sentence), user (quantifier reminder, guarded
modes only, when enabled), user (evidence and question, per the payload
layout). With ``prompt_order=evidence_first``: system (the opening every
contract shares), user (evidence and question), user (the rest of the mode's
contract), then the reminders. The prompt ends with an open assistant turn;
callers send ``stop=["<|im_end|>"]``.

Evidence blocks are rendered as ``<evidence id="E1" title="...">text</evidence>``
so both the model and the simulator can find block boundaries unambiguously.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

from qfarm.common.models import Evidence, Mode, Preflight
from qfarm.common.policy import Policy

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
STOP = [IM_END]

SYSTEM_PROMPTS: dict[Mode, str] = {
    Mode.QUOTE: (
        "You answer questions using only the evidence blocks provided. "
        "Answer with verbatim quotes from the evidence, one per line, each followed by its "
        'evidence id, for example: "exact words copied from a block" [E3]. '
        "Copy the words exactly; do not paraphrase and do not add prose."
    ),
    Mode.CLAIM_LATTICE_POINTER: (
        "You answer questions using only the evidence blocks provided. "
        "Write one claim per line. End every line with one or more pointer tags naming the "
        "evidence blocks that support it, for example [E2] or [E2, E5]. "
        "Write no untagged prose: every line must carry at least one pointer tag."
    ),
    Mode.CLAIM_LATTICE: (
        "You answer questions using only the evidence blocks provided. "
        'Reply with a single JSON object of the form {"claims": [{"claim": "...", '
        '"evidence": ["E2"], "warrant": "..."}]} where each warrant is a verbatim quote '
        "from one of the cited evidence blocks. Output only the JSON object."
    ),
}

# What every mode's contract opens with. With ``prompt_order=evidence_first`` it is the whole
# system turn and the rest of the contract follows the evidence, so a question's prompts in
# every mode are alike up to the end of the evidence.
SHARED_PREAMBLE = "You answer questions using only the evidence blocks provided."
if not all(p.startswith(SHARED_PREAMBLE + " ") for p in SYSTEM_PROMPTS.values()):
    raise RuntimeError("qfarm.common.grounding.prompts: every mode's contract opens with SHARED_PREAMBLE")

GROUNDING_REMINDERS: dict[Mode, str] = {
    Mode.QUOTE: "Reminder: quote the evidence verbatim, one quote per line, each followed by its [E#] id.",
    Mode.CLAIM_LATTICE_POINTER: "Reminder: one claim per line, every line ending with its [E#] pointer tags, no untagged prose.",
    Mode.CLAIM_LATTICE: 'Reminder: reply only with the JSON object {"claims": [...]}, each warrant copied verbatim from a cited block.',
}

# Distinctive phrases the simulator (or any reader) can use to tell the mode.
MODE_MARKERS: dict[Mode, str] = {
    Mode.QUOTE: "Answer with verbatim quotes from the evidence",
    Mode.CLAIM_LATTICE_POINTER: "Write one claim per line. End every line with one or more pointer tags",
    Mode.CLAIM_LATTICE: "Reply with a single JSON object",
}

EVIDENCE_BLOCK_RE = re.compile(
    r'<evidence id="(?P<id>E\d+)" title="(?P<title>[^"]*)">\n(?P<text>.*?)\n</evidence>', re.S
)
QUESTION_RE = re.compile(r"^Question: (?P<q>.+?)(?:<\|im_end\|>)?$", re.M)


def chatml_turn(role: str, content: str) -> str:
    return f"{IM_START}{role}\n{content}{IM_END}\n"


def render_evidence_block(ev: Evidence) -> str:
    title = html.escape(ev.title, quote=True)
    return f'<evidence id="{ev.id}" title="{title}">\n{ev.text}\n</evidence>'


def select_evidence(evidence: Sequence[Evidence], max_chars: int) -> list[Evidence]:
    """Keep blocks in rank order while their text fits; whole blocks drop from the tail."""
    kept: list[Evidence] = []
    used = 0
    for ev in evidence:
        if used + len(ev.text) > max_chars:
            break
        kept.append(ev)
        used += len(ev.text)
    return kept


def render_payload(question: str, blocks: Sequence[Evidence], layout: str) -> str:
    q_line = f"Question: {question}"
    rendered = [render_evidence_block(b) for b in blocks] or ["(no evidence was retrieved)"]
    if layout == "bookend":
        parts = [q_line, "Evidence:", *rendered, q_line]
    elif layout == "per_chunk":
        parts = ["Evidence:"]
        for block in rendered:
            parts += [block, q_line]
    else:  # tail
        parts = ["Evidence:", *rendered, q_line]
    return "\n\n".join(parts)


@dataclass(frozen=True)
class BuiltPrompt:
    text: str
    evidence: tuple[Evidence, ...]  # the blocks actually shown to the model


def evidence_cap(preflight: Preflight | None) -> int | None:
    """The preflight contract's evidence clause: with caps enforced, a broad question's
    model sees no more blocks than the claims it may make (docs/grounding.md,
    'Preflight, reject-broad, allow-broad', decision 7). None: no cap on the blocks."""
    if preflight is None or not preflight.cap_enforced or not preflight.quantifier.is_broad:
        return None
    if preflight.exploratory or preflight.claim_cap is None:
        return None
    return max(1, preflight.claim_cap)


def build_prompt(
    question: str,
    mode: Mode,
    evidence: Sequence[Evidence],
    policy: Policy,
    preflight: Preflight | None = None,
) -> BuiltPrompt:
    """Render the full ChatML prompt for one job."""
    from qfarm.common.grounding.reminders import render_quantifier_reminder  # avoids a cycle

    blocks = select_evidence(evidence, policy.context_chars(mode.value))
    if evidence_cap(preflight) is not None:
        blocks = blocks[: evidence_cap(preflight)]
    instructions = [chatml_turn("user", GROUNDING_REMINDERS[mode])]
    reminder = render_quantifier_reminder(mode, policy, preflight)
    if reminder:
        instructions.append(chatml_turn("user", reminder))
    payload = chatml_turn("user", render_payload(question, blocks, policy.user_payload_layout))
    if policy.prompt_order == "evidence_first":
        contract = SYSTEM_PROMPTS[mode].removeprefix(SHARED_PREAMBLE + " ")
        turns = [chatml_turn("system", SHARED_PREAMBLE), payload, chatml_turn("user", contract),
                 *instructions]  # fmt: skip
    else:
        turns = [chatml_turn("system", SYSTEM_PROMPTS[mode]), *instructions, payload]
    turns.append(f"{IM_START}assistant\n")
    return BuiltPrompt(text="".join(turns), evidence=tuple(blocks))


def shareable_opening(prompt: str) -> str:
    """The opening of a prompt that other prompts can have too: through the end of the turn
    that holds its evidence (the last ``</evidence>``). With ``prompt_order=evidence_first``
    that is the same for a question's prompts in every mode; in the default order, where the
    evidence turn comes last, it is the whole prompt but the open assistant turn. A prompt
    with no evidence block is all opening."""
    end = prompt.rfind("</evidence>")
    if end < 0:
        return prompt
    turn_end = prompt.find(IM_END, end)
    return prompt if turn_end < 0 else prompt[: turn_end + len(IM_END)]


@dataclass(frozen=True)
class ParsedPrompt:
    mode: Mode | None
    question: str | None
    blocks: tuple[tuple[str, str, str], ...]  # (id, title, text)


def parse_prompt(prompt: str) -> ParsedPrompt:
    """Recover mode, question and evidence blocks from a prompt built here."""
    mode = next((m for m, marker in MODE_MARKERS.items() if marker in prompt), None)
    blocks = tuple(
        (m["id"], html.unescape(m["title"]), m["text"]) for m in EVIDENCE_BLOCK_RE.finditer(prompt)
    )
    q = QUESTION_RE.search(prompt)
    return ParsedPrompt(mode=mode, question=q["q"].strip() if q else None, blocks=blocks)
