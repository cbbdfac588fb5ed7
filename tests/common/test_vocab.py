"""One vocabulary, defined once: ``common/vocab.py`` is the only module that spells it."""

from __future__ import annotations

import json
import re
from enum import StrEnum
from pathlib import Path

import pytest

from qfarm.common import vocab
from qfarm.common.models import QuantifierInfo, Row
from qfarm.common.vocab import Intensity, Label, Mode, Verdict, ViolationKind

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("common", "worker", "producer", "ops", "qfarm")
ENUMS: tuple[type[StrEnum], ...] = (Intensity, Verdict, Label, ViolationKind)
# Collections of the vocabulary that used to be re-declared next to their users.
COLLECTIONS = ("ALL_MODES", "LATTICE_MODES", "ALL_INTENSITIES", "BROAD_INTENSITIES")


def _product_sources() -> list[Path]:
    return [
        p
        for top in PRODUCT
        for p in sorted((ROOT / top).rglob("*.py"))
        if p != ROOT / "common" / "vocab.py"
    ]


def test_no_product_module_spells_a_member_as_a_string_literal() -> None:
    words = sorted({m.value for e in ENUMS for m in e}, key=len, reverse=True)
    literal = re.compile(r"""["']({})["']""".format("|".join(map(re.escape, words))))
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in _product_sources()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if literal.search(line)
    ]
    assert hits == [], "use the qfarm.common.vocab member instead:\n" + "\n".join(hits)


def test_no_product_module_redeclares_a_vocabulary_collection() -> None:
    declared = re.compile(r"^({}|MODE_NAMES|INTENSITIES)\s*[:=]".format("|".join(COLLECTIONS)))
    hits = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _product_sources()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if declared.match(line)
    ]
    assert hits == []
    assert all(hasattr(vocab, name) for name in COLLECTIONS)


@pytest.mark.parametrize("member", [m for e in (*ENUMS, Mode) for m in e])
def test_members_serialize_as_their_plain_string(member: StrEnum) -> None:
    assert json.dumps(member) == json.dumps(member.value)
    assert f"{member}" == member.value


def test_a_row_read_back_from_json_compares_equal_to_the_members() -> None:
    row = Row(
        run_id="r", job_id="j", question="q", question_id="q1", mode=Mode.QUOTE,
        sample_index=0, verdict=Verdict.STRICT, label=Label.EVIDENCE_WARRANTED,
        quantifier_intensity=QuantifierInfo().intensity,
    )
    plain = json.loads(row.model_dump_json())
    assert (plain["mode"], plain["verdict"], plain["quantifier_intensity"]) == (
        "quote", "STRICT", "SINGULAR",
    )
    again = Row.model_validate(plain)
    assert again.quantifier_intensity is Intensity.SINGULAR and again == row
