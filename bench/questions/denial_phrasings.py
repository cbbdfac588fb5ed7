"""Denials and non-denials, generated apart from the sidecar's grammar, and its score.

``python -m bench.questions.denial_phrasings`` writes ``denial_phrasings.jsonl``
(one ``{"id", "question", "answer", "denial", "kind", "part"}`` per line);
``--score`` prints the precision and recall of clause A (the denial test of
the answerability sidecar, with its partial-denial rule) on that file and lists
its errors. docs/grounding.md, 'Answerability sidecar', quotes the figures.

How the answers are made, and why it is a different method from the
sidecar's: the sidecar reads a denial as negation × reporting verb or state ×
object, from word tables. Here every answer is a whole hand-written sentence
("core") about a question's things, written as a model might answer, wrapped
in an opener and a closer picked by a digest; nothing is composed from the
sidecar's tables and nothing here imports them. Kinds:

* ``denial``: the answer says the evidence does not give what was asked;
* ``partial``: it denies a detail (dates, chart positions, a publisher) of
  another kind than the question asks for, not the answer;
* ``fact``: a negative statement about the world ("the album did not chart");
* ``affirm``: the answer gives the things, sometimes with a hedge.

The cores under ``HELDOUT`` were written after the grammar was last changed
and never used to change it (``"part": "heldout"``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "denial_phrasings.jsonl"

# (question, plural thing, possessive pronoun, person)
QUESTIONS: tuple[tuple[str, str, str, str], ...] = (
    ("What songs did Veronica Ballestrini record?", "songs", "her", "Veronica Ballestrini"),
    ("What paintings did Frida Kahlo create?", "paintings", "her", "Frida Kahlo"),
    ("Which novels did Albert Camus write?", "novels", "his", "Albert Camus"),
    ("What films did Agnès Varda direct?", "films", "her", "Agnès Varda"),
    ("Which operas did Giacomo Puccini compose?", "operas", "his", "Giacomo Puccini"),
    ("What buildings did Antoni Gaudí design?", "buildings", "his", "Antoni Gaudí"),
)
OPENERS = (
    "",
    "Unfortunately, ",
    "Sorry, but ",
    "Based on the evidence, ",
    "Looking at the passages, ",
    "After reviewing the provided text, ",
    "To be honest, ",
    "From what I can see, ",
)
CLOSERS = (
    "",
    " I can only tell you that {p} was active for many years.",
    " You may want to consult another source.",
    " So I can't answer the question.",
)

# {t} thing, {p} pronoun (her/his), {w} the person. One sentence each.
DENIALS: tuple[str, ...] = (
    "{p} {t} are not mentioned.",
    "the evidence does not mention any of {p} {t}.",
    "the passages don't list {p} {t}.",
    "I could not find {p} {t} in the passages.",
    "I couldn't find a list of {t} by {w}.",
    "there is no information about {t} by {w}.",
    "the provided text contains no mention of {p} {t}.",
    "none of the passages name {p} {t}.",
    "the context doesn't say which {t} {w} made.",
    "the titles of {p} {t} are not given in the evidence.",
    "{p} {t} aren't listed anywhere in the passages.",
    "it is unclear from the evidence which {t} {w} made.",
    "the evidence is silent on {p} {t}.",
    "I'm unable to identify any {t} by {w} from the passages.",
    "the passages make no reference to {p} {t}.",
    "the {t} of {w} are not specified.",
    "there's no mention of {p} {t} in the evidence.",
    "the sources say nothing about {p} {t}.",
    "which {t} {w} produced cannot be determined from the passages.",
    "it's not possible to tell which {t} {w} made based on the evidence.",
    "I was not able to locate any {t} by {w} in the text.",
    "the evidence provides no list of {p} {t}.",
    "the documents fail to mention {p} {t}.",
    "{p} {t} do not appear to be mentioned in the passages.",
    "{p} {t} seem not to be covered by the evidence.",
    "the names of {p} {t} are unknown from the provided passages.",
    "the passages do not seem to name any of {p} {t}.",
    "we couldn't determine {p} {t} from the evidence.",
    "the text lacks any information about {p} {t}.",
    "no titles of {p} {t} are mentioned.",
    "the question cannot be answered from the passages.",
    "this information is not in the evidence.",
    "nothing in the passages names {p} {t}.",
    "the evidence doesn't specify {p} {t}.",
    "the specific {t} are not stated.",
    "{p} {t} remain unspecified in the evidence.",
    "I cannot say which {t} {w} made, as the passages do not list them.",
    "the passages offer no details on {p} {t}.",
    "there is no list of {t} by {w} in the evidence.",
    "it cannot be established from the text which {t} {w} made.",
    "I don't see any {t} by {w} mentioned in the passages.",
    "the {t} themselves are not named in the evidence.",
    "the evidence never mentions {p} {t}.",
    "{p} {t} are nowhere mentioned.",
    "the provided excerpts do not identify {p} {t}.",
    "there are no {t} by {w} listed in the passages.",
    "I have no way to tell which {t} {w} made from this evidence.",
    "the article doesn't go into {p} {t}.",
    "what {t} {w} made is not stated in the evidence.",
    "the evidence does not clarify which {t} {w} made.",
    "E1 doesn't mention {p} {t}, and neither does E2.",
    "the passages don't actually name {p} {t}.",
    "the {t} are undetermined from the passages given.",
    "{p} {t} weren't mentioned in any of the passages.",
    "there doesn't seem to be any mention of {p} {t}.",
    "I didn't find {p} {t} in the evidence.",
    "the evidence provided does not include {p} {t}.",
    "the excerpts are silent about {p} {t}.",
    "the passages don't talk about {p} {t}.",
    "no {t} by {w} are named in the evidence.",
    "{p} {t} have not been mentioned in the passages.",
    "the passages describe {w} but do not list {p} {t}.",
    "I am unable to determine {p} {t} from the given information.",
    "the evidence gives no indication of {p} {t}.",
    "the passages contain no information regarding {p} {t}.",
    "it is not clear which {t} {w} made.",
    "the evidence does not state which {t} {w} made.",
    "{p} {t} are not specified in the passages.",
    "the text does not reveal {p} {t}.",
    "the documents say nothing of {p} {t}.",
    "I can't find any {t} by {w} in the passages.",
    "the evidence does not provide the names of {p} {t}.",
    "nothing in the evidence mentions {p} {t}.",
    "the passages never name {p} {t}.",
    "{p} {t} aren't stated in the evidence.",
    "none of the provided documents mention {p} {t}.",
    "there is no record of {p} {t} in the evidence.",
    "it's unclear which {t} {w} made.",
    "the evidence doesn't tell us which {t} {w} made.",
    "the passages do not contain any of {p} {t}.",
)
HELDOUT: tuple[str, ...] = (
    "the material I was given doesn't name a single one of {p} {t}.",
    "{p} {t} go unmentioned in the passages.",
    "the passages are unclear about which {t} {w} made.",
    "there isn't anything in the evidence about {p} {t}.",
    "I wasn't able to find {p} {t} in the evidence.",
    "the evidence doesn't list a single one of {p} {t}.",
    "the answer is not in the passages.",
    "the passages offer nothing on {p} {t}.",
    "we could not identify {p} {t} in the provided text.",
    "the provided passages do not discuss {p} {t}.",
    "{p} {t} aren't identified in the evidence.",
    "no information on {p} {t} is provided.",
    "the evidence does not refer to {p} {t} at all.",
    "I can't identify {p} {t} based on the passages.",
    "the text never lists {p} {t}.",
    "it's impossible to determine {p} {t} from the evidence.",
    "the {t} by {w} are not named in the text.",
    "the passages do not enumerate {p} {t}.",
    "{p} {t} are not discussed in the evidence.",
    "the evidence contains no list of {p} {t}.",
    "the excerpts don't specify which {t} {w} made.",
    "there's no information in the passages about {p} {t}.",
    "I could not determine which {t} {w} made.",
    "the sources do not name {p} {t}.",
    "the evidence doesn't seem to list {p} {t}.",
    "I'm afraid {p} {t} are not mentioned in the passages.",
    "which {t} {w} made isn't stated.",
    "the passages make no mention of {p} {t}.",
    "the titles are not provided.",
    "{p} {t} are absent from the evidence.",
)
PARTIALS: tuple[str, ...] = (
    '{p} {t} include "Amazing" and "Pretty Ugly"; the release dates are not mentioned.',
    'the evidence names "Amazing" as one of {p} {t}, but it does not say when it was published.',
    '{p} {t} include "Amazing"; no specific chart positions are given.',
    '"Amazing" is one of {p} {t}, though the year is not stated.',
    '"Amazing" is among {p} {t}; the passages don\'t mention its chart position.',
    '{p} {t} are "Amazing" and "Pretty Ugly", but their dates are unclear.',
    '"Amazing" is listed, although the label is not mentioned.',
    '{p} {t} include "Amazing"; the evidence does not say where it was recorded.',
    'one of {p} {t} is "Amazing"; its length is not specified.',
    '"Amazing" is named in E1, but the publisher is not given in the passages.',
    '"Amazing" is one; further details are not provided.',
    '{p} {t} include "Amazing"; it is unclear when they were first shown.',
    '"Amazing" appears in the evidence, though its sales figures are not mentioned.',
    '{p} {t} include "Amazing", and the exact dates are not stated.',
    '"Amazing" is among them; the passages do not indicate how many copies were sold.',
)
FACTS: tuple[str, ...] = (
    "{w} never married.",
    "{p} first work was not a success.",
    "{w} did not live to see {p} {t} become famous.",
    "the critics did not like {p} early {t}.",
    "{w} was not born in Paris.",
    "{p} {t} were not popular until after {p} death.",
    "{w} could not find a patron for years.",
    "none of {p} {t} was a commercial failure.",
    "{w} is not only famous for {p} {t} but also for {p} letters.",
    "it was not until 1942 that {p} {t} became known.",
    "{w} never stopped working on {p} {t}.",
    "there is no doubt that {p} {t} changed the field.",
    "{p} {t} did not follow the fashion of the time.",
    "{w} refused to sign with a major label, and no contract was offered.",
    "the evidence does not contradict that {w} made {p} {t}.",
)
AFFIRMS: tuple[str, ...] = (
    '{p} {t} include "Amazing" and "Out There Somewhere". [E2]',
    'the passages list "Amazing", "Pretty Ugly" and "Hoochie Coochie" among {p} {t}.',
    'E1 mentions "Amazing" as one of {p} {t}.',
    'I found {p} {t} listed in E2: "Amazing" and "Pretty Ugly".',
    'the evidence names several of {p} {t}, such as "Amazing".',
    '{p} best known {t} are "Amazing" and "Out There Somewhere", as E2 states.',
    'according to the passages, {p} {t} include "Amazing", though the list may be incomplete.',
)

SHARED_FILLS = 3


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def _sentence(core: str, q: tuple[str, str, str, str], opener: str, closer: str) -> str:
    _question, thing, pronoun, person = q
    body = core.format(t=thing, p=pronoun, w=person)
    text = opener + body if opener else body[0].upper() + body[1:]
    return text + closer.format(p="she" if pronoun == "her" else "he")


def build() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    groups = (
        ("denial", True, "tune", DENIALS, 4),
        ("denial", True, "heldout", HELDOUT, 4),
        ("partial", False, "tune", PARTIALS, SHARED_FILLS),
        ("fact", False, "tune", FACTS, SHARED_FILLS),
        ("affirm", False, "tune", AFFIRMS, SHARED_FILLS),
    )
    for kind, denial, part, cores, fills in groups:
        for ci, core in enumerate(cores):
            start = _digest(core)
            for k in range(fills):
                q = QUESTIONS[(start + k) % len(QUESTIONS)]
                opener = OPENERS[(start // 7 + 3 * k) % len(OPENERS)]
                closer = CLOSERS[(start // 11 + k) % len(CLOSERS)] if kind == "denial" else ""
                rows.append(
                    {
                        "id": f"dp-{kind}-{part}-{ci:03d}-{k}",
                        "question": q[0],
                        "answer": _sentence(core, q, opener, closer),
                        "denial": denial,
                        "kind": kind,
                        "part": part,
                    }
                )
    return rows


def write(path: Path = OUT) -> int:
    rows = build()
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", "utf-8")
    return len(rows)


def fires(question: str, answer: str) -> bool:
    """Clause A as the sidecar runs it: a denial of the answer, not of a detail."""
    from qfarm.common.grounding.sidecar import denial_of_answer

    return denial_of_answer(question, answer) is not None


def score(path: Path = OUT, part: str | None = None) -> dict[str, int]:
    """True/false positives and negatives of clause A over the file (or one part of it)."""
    counts = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if part is not None and row["denial"] and row["part"] != part:
            continue
        hit = fires(row["question"], row["answer"])
        key = ("tp" if hit else "fn") if row["denial"] else ("fp" if hit else "tn")
        counts[key] += 1
    return counts


def errors(path: Path = OUT) -> list[tuple[str, str]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if fires(row["question"], row["answer"]) != row["denial"]:
            out.append((row["kind"] + "/" + row["part"], row["answer"]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--score", action="store_true", help="score clause A on the file")
    args = parser.parse_args(argv)
    if not args.score:
        print(f"wrote {write()} answers to {OUT}")
        return 0
    rows = [json.loads(line) for line in OUT.read_text(encoding="utf-8").splitlines()]
    n_den = sum(r["denial"] for r in rows)
    print(f"{len(rows)} answers: {n_den} denials, {len(rows) - n_den} non-denials")
    print("| denials scored | denials | non-denials | recall | precision | false positives |")
    print("|---|---|---|---|---|---|")
    for part in ("tune", "heldout", None):
        c = score(part=part)
        recall = c["tp"] / max(1, c["tp"] + c["fn"])
        precision = c["tp"] / max(1, c["tp"] + c["fp"])
        print(
            f"| {part or 'all'} | {c['tp'] + c['fn']} | {c['fp'] + c['tn']} | {recall:.3f} "
            f"| {precision:.3f} | {c['fp']} |"
        )
    for kind, answer in errors():
        print(f"error ({kind}): {answer}")
    c = score()
    print(f"denial_recall={c['tp'] / max(1, c['tp'] + c['fn']):.3f}")
    print(f"denial_precision={c['tp'] / max(1, c['tp'] + c['fp']):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
