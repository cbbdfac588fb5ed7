"""Literal gates (common/grounding/gates.py): a pattern is skipped only where it cannot match.

The reading of a pattern's required words is checked on small patterns of each shape,
then every shipped pattern's gate on text it was written for: the shipped question sets
and answers, and the examples the classifier's and the denial grammar's own tests use
(every string constant in those test files), each in the form the pattern is run on.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from qfarm.common.grounding import denials, quantifier
from qfarm.common.grounding.gates import DIGIT, GatedPatterns, gate_of
from qfarm.common.grounding.names import find_name_spans, fold_question, replace_spans
from qfarm.common.grounding.verify.text import normalize

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize(
    ("pattern", "gate"),
    [
        ("every", {"every"}),
        (r"(?<![\w'-])every(?![\w'-])", {"every"}),
        (r"(?:list|name|cite) everything", {" everything"}),
        (r"(?:list|name|enumerate) (?:al|ev)", {"list", "name", "enumerate"}),
        (r"colou?r", {"colo"}),
        (r"(?:abcd)?ef", {"ef"}),
        (r"x(?:abcd)*y", {"x"}),  # a tie keeps the first run
        (r"(?:abcd)+", {"abcd"}),
        (r"(?:abcd){2,3}", {"abcd"}),
        (r"(?:abcd){0,3}", None),
        (r"(?<=foo)bar", {"bar"}),
        (r"(?=foo)", None),
        (r"(?!foo)\w+", None),
        (r"(?:abc|\w+)", None),
        (r"(?:ab|cd)(?:efgh|ijkl)", {"efgh", "ijkl"}),
        (r"\d+", {DIGIT}),
        (r"[0-9]+", None),
        (r"(?i)every", None),
        (r"(?i:every)", None),
        (r"x", {"x"}),
    ],
)
def test_a_gate_holds_only_words_every_match_contains(pattern: str, gate: set[str] | None) -> None:
    assert gate_of(re.compile(pattern)) == (None if gate is None else frozenset(gate))


def test_candidates_keep_order_and_the_patterns_without_a_gate() -> None:
    gated = GatedPatterns(re.compile(p) for p in (r"(?!x)\w+", "every", r"no (?:one|body)", r"\d+ km"))
    assert gated.gates[0] is None
    assert gated.candidates("the useful one") == [0]
    assert gated.candidates("everyone came, 5 km") == [0, 1, 3]
    assert gated.candidates("") == [0]
    assert gated.candidates("nobody? no one") == [0, 2]
    assert gated.candidates("٣ km") == [0, 3]  # a digit of another script is a digit to \d


def _test_strings(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip():
            yield node.value


def _shipped_texts() -> list[str]:
    """Every question (and answer) of the shipped sets, and the grounding tests' strings."""
    out: list[str] = []
    for path in sorted((REPO / "bench/questions").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("{"):
                item = json.loads(line)
                out += [item[k] for k in ("question", "answer") if isinstance(item.get(k), str)]
    for path in sorted((REPO / "bench/questions").glob("*.txt")):
        out += [ln for ln in path.read_text(encoding="utf-8").splitlines()
                if ln.strip() and not ln.startswith("#")]  # fmt: skip
    for name in ("test_quantifier.py", "test_preflight.py", "test_names.py", "test_sidecar.py",
                 "test_caps.py"):  # fmt: skip
        out += list(_test_strings(HERE / name))
    return list(dict.fromkeys(out))


TEXTS = _shipped_texts()


def _classifier_inputs(text: str) -> list[str]:
    """The texts the classifier runs its markers on for this question: the question, with
    its names hidden, and each name on its own."""
    folded = fold_question(text)
    names = find_name_spans(folded, None)
    out = [quantifier._normalize_question(text), quantifier._normalize_question(folded)]
    out += [quantifier._normalize_question(replace_spans(folded, names))]
    out += [quantifier._normalize_question(folded[n.start : n.end]) for n in names]
    return out


def _denial_inputs(text: str) -> list[str]:
    """The sentences the denial grammar runs its families on."""
    spelled = denials._spell_out(normalize(text))
    return [m.group(0) for m in denials._SENTENCE_RE.finditer(spelled)]


def _skipped_matches(gated: GatedPatterns, texts: list[str]) -> list[tuple[int, str]]:
    """(pattern index, text) where the pattern matches but its gate would skip it."""
    misses = []
    for text in texts:
        allowed = set(gated.candidates(text))
        misses += [(i, text) for i, p in enumerate(gated.patterns)
                   if i not in allowed and p.search(text)]  # fmt: skip
    return misses


def test_the_shipped_texts_are_many_and_reach_every_rung_and_family() -> None:
    assert len(TEXTS) > 5000
    inputs = [t for text in TEXTS for t in _classifier_inputs(text)]
    reached = {quantifier.MARKERS[i].rung for i, p in enumerate(quantifier._GATED_MARKERS.patterns)
               if any(p.search(t) for t in inputs)}  # fmt: skip
    assert reached == {m.rung for m in quantifier.MARKERS}
    sentences = [s for text in TEXTS for s in _denial_inputs(text)]
    fired = {name for name, p, _ in denials._FAMILY_LIST if any(p.search(s) for s in sentences)}
    assert fired == set(denials.FAMILIES)


def test_no_quantifier_marker_is_skipped_where_it_matches() -> None:
    inputs = list(dict.fromkeys(t for text in TEXTS for t in _classifier_inputs(text)))
    misses = _skipped_matches(quantifier._GATED_MARKERS, inputs)
    assert not misses, misses[:5]


def test_no_denial_family_is_skipped_where_it_matches() -> None:
    sentences = list(dict.fromkeys(s for text in TEXTS for s in _denial_inputs(text)))
    misses = _skipped_matches(denials._GATED_FAMILIES, sentences)
    assert not misses, misses[:5]


def test_every_shipped_pattern_has_a_gate() -> None:
    """Not needed for soundness (an ungated pattern always runs); it keeps the gates doing
    their work: a new pattern the reading cannot gate shows up here."""
    assert None not in quantifier._GATED_MARKERS.gates
    assert None not in denials._GATED_FAMILIES.gates


def test_a_gate_that_drops_a_required_word_is_caught() -> None:
    """The check above fails on an unsound gate: here one that takes an optional part
    for a required one."""
    gated = GatedPatterns([re.compile(r"(?:tell me )?about")])
    gated.gates = (frozenset({"tell me "}),)
    gated._users = (("tell me ", (0,)),)
    assert _skipped_matches(gated, ["what about rome?"]) == [(0, "what about rome?")]
