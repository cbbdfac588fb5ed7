"""Regression cases from a real model's text (tests/fixtures/real_model_answers.jsonl).

Each line is one row of the committed real-model run (bench/runs/, SmolLM2-135M
on CPU): the question, the blocks the model was shown, what it wrote, and the
outcome the verifier, the quantifier guard and the answerability sidecar must
give for that text. A case is here because the code once read it wrongly, or
to pin a reading the simulator's text never exercised, or (``known_miss``) because the
code still reads it wrongly and the right reading is waiting for a fix; ``source`` names the row
(``python -m bench.real_model fixture RUN --id QID:MODE`` writes such lines).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from qfarm.common.grounding.preflight import run_preflight
from qfarm.common.grounding.sidecar import assess_answerability
from qfarm.common.grounding.verify import verify_answer
from qfarm.common.models import Evidence, Mode
from qfarm.common.policy import LOCAL_CPU_POLICY, build_policy
from qfarm.common.profiles import SMALL_LOCAL_PROFILE_ID

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "real_model_answers.jsonl"
CASES = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines() if line]


def _evidence(case: dict[str, Any]) -> list[Evidence]:
    return [
        Evidence(id=b["id"], doc_id=b["title"], chunk_id=f"{b['title']}#{n}", title=b["title"],
                 text=b["text"], score=1.0, offset_start=0, offset_end=len(b["text"]))
        for n, b in enumerate(case["evidence"])
    ]


def _param(case: dict[str, Any]) -> Any:
    """A case the code still reads wrongly carries ``known_miss`` (what it gets wrong) and the
    right reading as ``expected``: it fails until the verifier is fixed, then must be
    promoted (strict xfail)."""
    marks = [pytest.mark.xfail(strict=True, reason=case["known_miss"])] if "known_miss" in case else []
    return pytest.param(case, marks=marks, id=case["source"].split(" ", 1)[1])


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_real_model_answer_reads_as_expected(case: dict[str, Any]) -> None:
    policy = build_policy(dict(LOCAL_CPU_POLICY))
    mode = Mode(case["mode"])
    pre = run_preflight(case["question"], mode, policy, SMALL_LOCAL_PROFILE_ID)
    evidence = _evidence(case)
    ver = verify_answer(case["answer"], question=case["question"], mode=mode,
                        evidence=evidence, policy=policy, preflight=pre)
    ans = assess_answerability(case["question"], case["answer"], evidence, policy, pre.quantifier)
    got = {
        "verdict": ver.verdict.value, "label": ver.label.value,
        "violation_kinds": [k.value for k in ver.violation_kinds],
        "would_fire_kinds": [k.value for k in ver.would_fire_kinds],
        "n_claims": ver.n_claims, "n_verified": ver.n_verified,
        "quantifier_intensity": pre.quantifier.intensity.value,
        "scope_bound_hint": pre.quantifier.scope_bound_hint,
        "answerability_fired": ans is not None,
    }
    assert got == case["expected"]


def test_the_fixture_holds_real_rows() -> None:
    assert CASES and all(c["source"] and c["answer"] and c["evidence"] for c in CASES)
