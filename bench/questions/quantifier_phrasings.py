"""Phrasings of every quantifier rung, generated apart from the classifier, and its score.

``python -m bench.questions.quantifier_phrasings`` writes
``quantifier_phrasings.jsonl`` (one ``{"id", "question", "rung", "count"}`` per
line); ``--score`` prints the classifier's accuracy per rung on that file and
lists what it misses (docs/grounding.md, 'Quantifier classifier' quotes the
figures).

How the phrasings are made, and why it is a different method from the
classifier's: the classifier matches word classes (a quantifier word × a noun
frame × a verb frame). Here every phrasing is a whole hand-written carrier
sentence, written the way people ask, with its own vocabulary of topics,
plural nouns and request verbs; a carrier names its rung (and its number for
the counted rungs) as a person reading it would. Each carrier is filled with
topics picked by a digest of the carrier, so the file is byte-stable. Nothing
here imports the classifier's tables; the carriers were written from the rung
definitions (docs/grounding.md, the rung table), not from its patterns.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import Counter, defaultdict
from pathlib import Path

OUT = Path(__file__).resolve().parent / "quantifier_phrasings.jsonl"
PER_CARRIER = 3

# (plural noun, owner phrase) pairs a carrier can talk about.
TOPICS: tuple[tuple[str, str], ...] = (
    ("novels", "Charles Dickens"),
    ("symphonies", "Beethoven"),
    ("films", "Akira Kurosawa"),
    ("paintings", "Claude Monet"),
    ("inventions", "Nikola Tesla"),
    ("battles", "Julius Caesar"),
    ("albums", "Fleetwood Mac"),
    ("poems", "Emily Dickinson"),
    ("plays", "Henrik Ibsen"),
    ("operas", "Giuseppe Verdi"),
    ("treaties", "the Ottoman Empire"),
    ("cathedrals", "medieval France"),
    ("volcanoes", "Iceland"),
    ("rivers", "Siberia"),
    ("species of birds", "the Galapagos"),
    ("dishes", "Peruvian cuisine"),
)
SUBJECTS: tuple[str, ...] = (
    "the Ming dynasty",
    "plate tectonics",
    "the Byzantine Empire",
    "quantum mechanics",
    "the Silk Road",
    "jazz in New Orleans",
    "the Meiji Restoration",
    "coral reefs",
    "the printing press",
    "the Hanseatic League",
)

# rung -> carriers; {n} plural noun, {o} owner, {s} subject. Counted rungs give
# their number as (carrier, count).
CARRIERS: dict[str, list[tuple[str, int | None]]] = {
    "ABSENT": [
        ("Which {n} by {o} received no awards at all?", None),
        ("Did {o} produce nothing after 1900?", None),
        ("Are none of the {n} of {o} still in print?", None),
        ("Why did nobody record the {n} of {o}?", None),
        ("Which of the {n} of {o} were never finished?", None),
        ("Which {n} of {o} are not held in any museum?", None),
        ("Is it true that not a single one of the {n} of {o} survives?", None),
        ("Where were zero {n} of {o} found?", None),
        ("Which {n} of {o} weren't translated into English?", None),
        ("Which {n} of {o} have no surviving copies?", None),
        ("Has {o} never written any {n}?", None),
        ("Which {n} by {o} did not sell well?", None),
        ("Were there no {n} by {o} before 1800?", None),
        ("Which {n} of {o} can't be dated?", None),
        ("Is there nowhere to see the {n} of {o}?", None),
        ("Which {n} of {o} had neither a title nor a date?", None),
    ],
    "SINGULAR": [
        ("What is the oldest of the {n} of {o}?", None),
        ("Who commissioned the best known of the {n} of {o}?", None),
        ("Where were the {n} of {o} first shown?", None),
        ("Which of the {n} of {o} is the longest?", None),
        ("When did {o} begin working on {n}?", None),
        ("What inspired the {n} of {o}?", None),
        ("Who owns the rights to the {n} of {o} today?", None),
        ("How many {n} did {o} leave behind?", None),
        ("Whose collection holds the {n} of {o}?", None),
        ("Why are the {n} of {o} admired?", None),
        ("Who first catalogued the {n} of {o}?", None),
        ("What did {s} change?", None),
        ("Who was the patron behind the {n} of {o}?", None),
        ("What is the scope of {s}?", None),
        ("Who hosted the premiere of the {n} of {o}?", None),
        ("What range of styles marks {s}?", None),
        ("What did {o} do first, {n} or portraits?", None),
        ("Who didn't like the {n} of {o}?", None),
        ("What whole number of {n} did {o} finish?", None),
    ],
    "PROPORTIONAL": [
        ("Were most of the {n} of {o} written in winter?", None),
        ("Did the majority of the {n} of {o} appear after 1850?", None),
        ("Why is half of the {n} of {o} lost?", None),
        ("What share of the {n} of {o} did critics praise, a third of them?", None),
        ("Were 40% of the {n} of {o} made abroad?", None),
        ("Which theme runs through the bulk of the {n} of {o}?", None),
        ("Did a minority of the {n} of {o} fail?", None),
        ("Do most historians rank the {n} of {o} highly?", None),
        ("Was a quarter of the {n} of {o} destroyed?", None),
        ("Did the lion's share of the {n} of {o} go to Paris?", None),
        ("Are two thirds of the {n} of {o} in private hands?", None),
        ("Did most critics dislike the {n} of {o}?", None),
    ],
    "SMALL_NUM_EXPLICIT": [
        ("Name three {n} by {o}.", 3),
        ("What are the top 5 {n} of {o}?", 5),
        ("Give me two {n} of {o}.", 2),
        ("Which seven {n} of {o} are the most famous?", 7),
        ("List four {n} by {o}, please.", 4),
        ("What are a couple of {n} by {o}?", 2),
        ("Pick a dozen {n} of {o}.", 12),
        ("Suggest about six {n} by {o}.", 6),
        ("What are roughly ten {n} of {o}?", 10),
        ("Recommend the first three {n} by {o}.", 3),
        ("Which eight early {n} of {o} stand out?", 8),
        ("What was the last of the {n} of {o}?", 1),
        ("Name a handful of {n} by {o}.", 5),
        ("What are {o}'s five best-known {n}?", 5),
        ("Name half a dozen {n} by {o}.", 6),
        ("Give me a pair of {n} of {o}.", 2),
        ("Which twelve major {n} did {o} complete?", 12),
        ("Name around 4 {n} by {o}.", 4),
        ("Name the last two {n} of {o}.", 2),
        ("Give one {n} by {o}.", 1),
        ("What were the second and third {n} of {o}?", 1),
    ],
    "COMPARATIVE_BOUND": [
        ("Name at least four {n} by {o}.", 4),
        ("Which {n} of {o} run longer than 3 hours, name no more than 6?", 6),
        ("Give up to ten {n} of {o}.", 10),
        ("Name between two and five {n} by {o}.", 5),
        ("List fewer than 8 {n} of {o}.", 8),
        ("Which {n} of {o} won more than 3 prizes?", 3),
        ("Name at most five {n} by {o}.", 5),
        ("Give no fewer than 3 {n} of {o}.", 3),
        ("Name over 5 {n} by {o}.", 5),
        ("Give a minimum of three {n} of {o}.", 3),
        ("Name not more than four {n} by {o}.", 4),
        ("Which {n} of {o} drew under 100 visitors, name up to 3?", 100),
    ],
    "FEW": [
        ("What are some {n} by {o}?", None),
        ("Name a few {n} of {o}.", None),
        ("Which several {n} of {o} were banned?", None),
        ("Can you suggest some lesser known {n} by {o}?", None),
        ("Mention a small number of {n} of {o}.", None),
        ("Are there some {n} of {o} that are rarely performed?", None),
        ("Were there a few {n} by {o} that flopped?", None),
        ("Share some {n} of {o} worth reading about.", None),
        ("Name a couple {n} by {o}.", None),
        ("Which {n} of {o} are not many people aware of?", None),
        ("Name one or two {n}, a few really, by {o}.", None),
        ("Give a smattering of {n} of {o}.", None),
    ],
    "MANY": [
        ("What are the many {n} of {o}?", None),
        ("Name numerous {n} by {o}.", None),
        ("Give me lots of {n} of {o}.", None),
        ("What various {n} did {o} produce?", None),
        ("Name loads of {n} by {o}.", None),
        ("Which countless {n} of {o} are praised?", None),
        ("Give me tons of {n} by {o}.", None),
        ("What are umpteen {n} of {o}?", None),
        ("Name plenty of {n} by {o}.", None),
        ("List a wide range of {n} of {o}.", None),
        ("What are multiple {n} by {o}?", None),
        ("Give a bunch of {n} by {o}.", None),
        ("Name quite a few {n} of {o}.", None),
        ("Show me a whole host of {n} by {o}.", None),
        ("Name a ton of {n} by {o}.", None),
        ("Give me heaps of {n} of {o}.", None),
        ("Name scads of {n} by {o}.", None),
        ("Give me a truckload of {n} by {o}.", None),
        ("Name a great many {n} of {o}.", None),
        ("What are innumerable {n} of {o}?", None),
        ("Name dozens of {n} by {o}.", None),
        ("Give me a raft of {n} of {o}.", None),
    ],
    "ALL": [
        ("List all the {n} of {o}.", None),
        ("What are all of the {n} by {o}?", None),
        ("Name every one of the {n} of {o}.", None),
        ("Which {n} did {o} make? Name each of them.", None),
        ("Give me each and every {n} by {o}.", None),
        ("Enumerate the {n} of {o}.", None),
        ("What is every single {n} of {o}?", None),
        ("Which {n} by {o} exist? I want all of them.", None),
        ("Name all of {o}'s {n}.", None),
        ("Which {n} did {o} write? Every one, please.", None),
        ("Give me the whole lot of {n} by {o}.", None),
        ("Could you list every {n} of {o}?", None),
        ("What {n} did {o} make, without leaving any out? Name them all.", None),
    ],
    "COMPREHENSIVE": [
        ("Give me a complete list of the {n} of {o}.", None),
        ("What is the full list of {n} by {o}?", None),
        ("Provide an exhaustive catalogue of the {n} of {o}.", None),
        ("Tell me everything you know about {s}.", None),
        ("What is the whole story of {s}?", None),
        ("Give me the complete roster of {n} of {o}.", None),
        ("What is the entire picture of {s}?", None),
        ("I want a comprehensive account of {s}.", None),
        ("Give the definitive inventory of the {n} of {o}.", None),
        ("Explain {s} in full detail, leave nothing out.", None),
        ("What is the complete history of {s}?", None),
        ("Tell me all there is to know about {s}.", None),
        ("Give me every detail of {s}.", None),
        ("What is the complete set of {n} of {o}?", None),
        ("Give me an in-depth, exhaustive treatment of {s}.", None),
        ("What is the full rundown of the {n} of {o}?", None),
        ("Cover {s} from start to finish.", None),
        ("Tell me absolutely everything about {s}.", None),
    ],
    "OPEN_REQUEST": [
        ("Tell me about {s}.", None),
        ("Describe {s}.", None),
        ("Explain {s} to me.", None),
        ("Summarize {s}.", None),
        ("Talk me through {s}.", None),
        ("Sum up {s} for me.", None),
        ("Walk me through {s}.", None),
        ("Give me an overview of {s}.", None),
        ("What can you tell me about {s}?", None),
        ("Could you outline {s}?", None),
        ("Discuss {s}.", None),
        ("Elaborate on {s}.", None),
        ("Fill me in on {s}.", None),
        ("Break down {s} for me.", None),
        ("Give me a rundown of {s}.", None),
        ("What about {s}?", None),
        ("Give me the lowdown on {s}.", None),
        ("Can you go over {s}?", None),
        ("I'd love to hear about {s}.", None),
        ("Run me through {s}.", None),
        ("Paint a picture of {s}.", None),
        ("Share what you know about {s}.", None),
        ("Brief me on {s}.", None),
        ("Teach me about {s}.", None),
        ("Introduce me to {s}.", None),
        ("Catch me up on {s}.", None),
        ("Help me understand {s}.", None),
        ("Give me a primer on {s}.", None),
    ],
}


# Written after the classifier was last changed and never used to change it: the
# held-out part of the file (``"part": "heldout"``); the carriers above are the
# tuning part (the classifier's word classes were extended on their misses).
HELDOUT_CARRIERS: dict[str, list[tuple[str, int | None]]] = {
    "ABSENT": [
        ("which {n} by {o} never got a premiere", None),
        ("Is there not one of the {n} of {o} left in Europe?", None),
        ("Which {n} of {o} aren't on display anywhere?", None),
        ("Did {o} leave nothing unfinished among the {n}?", None),
    ],
    "SINGULAR": [
        ("who paid for the {n} of {o}", None),
        ("In what city did {o} finish the {n}?", None),
        ("Who was behind the wide success of the {n} of {o}?", None),
        ("When did {s} end?", None),
    ],
    "PROPORTIONAL": [
        ("did the bulk of the {n} of {o} come late in life", None),
        ("Were a majority of the {n} of {o} commissioned?", None),
        ("Is half the output of {o} in {n}?", None),
        ("Were 10 percent of the {n} of {o} lost in the war?", None),
    ],
    "SMALL_NUM_EXPLICIT": [
        ("gimme 3 {n} by {o}", 3),
        ("What did {o} call the first of the {n}? I mean the name only.", 1),
        ("Which nine {n} of {o} do critics rank highest?", 9),
        ("Could you name approximately fifteen {n} of {o}?", 15),
        ("What are the top ten {n} by {o}?", 10),
    ],
    "COMPARATIVE_BOUND": [
        ("name no less than six {n} of {o}", 6),
        ("Could you list upwards of 20 {n} by {o}?", 20),
        ("Name a maximum of three {n} of {o}.", 3),
    ],
    "FEW": [
        ("any chance you could name some {n} of {o}", None),
        ("Which several {n} of {o} toured abroad?", None),
        ("Name just a few {n} by {o}.", None),
        ("Recommend some {n} of {o} for a beginner.", None),
    ],
    "MANY": [
        ("name a whole bunch of {n} by {o}", None),
        ("What are the various {n} of {o} about?", None),
        ("Give me a plethora of {n} of {o}.", None),
        ("Which myriad {n} of {o} influenced later artists?", None),
        ("Give me gazillions of {n} by {o}.", None),
    ],
    "ALL": [
        ("every {n} by {o}, please", None),
        ("Which are all the {n} of {o}?", None),
        ("Can you enumerate all {n} by {o}?", None),
        ("Name the {n} of {o}, each one of them.", None),
    ],
    "COMPREHENSIVE": [
        ("give me the full story of {s}", None),
        ("I need a thorough rundown of {s}.", None),
        ("What is the whole history of {s} from A to Z?", None),
        ("Provide the complete breakdown of the {n} of {o}.", None),
    ],
    "OPEN_REQUEST": [
        ("explain {s} like I'm five", None),
        ("Can you give me a summary of {s}?", None),
        ("Please describe the main ideas of {s}.", None),
        ("Take me through {s}.", None),
        ("Talk about {s}.", None),
        ("I want to learn about {s}.", None),
    ],
}


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def build() -> list[dict[str, object]]:
    """Every carrier filled with ``PER_CARRIER`` topics picked by the carrier's digest."""
    rows: list[dict[str, object]] = []
    for part, table in (("tune", CARRIERS), ("heldout", HELDOUT_CARRIERS)):
        for rung, carriers in table.items():
            for ci, (carrier, count) in enumerate(carriers):
                rows += _fill(part, rung, ci, carrier, count)
    return rows


def _fill(
    part: str, rung: str, ci: int, carrier: str, count: int | None
) -> list[dict[str, object]]:
    start = _digest(carrier)
    uses_subject = "{s}" in carrier
    pool = len(SUBJECTS) if uses_subject else len(TOPICS)
    rows: list[dict[str, object]] = []
    seen: set[str] = set()
    for k in range(PER_CARRIER):
        idx = (start + 7 * k) % pool
        if uses_subject:
            question = carrier.format(s=SUBJECTS[idx])
        else:
            noun, owner = TOPICS[idx]
            question = carrier.format(n=noun, o=owner)
        question = question[0].upper() + question[1:] if part == "tune" else question
        if question in seen:
            continue
        seen.add(question)
        prefix = "qp" if part == "tune" else "qh"
        rows.append(
            {
                "id": f"{prefix}-{rung.lower()}-{ci:02d}-{k}",
                "question": question,
                "rung": rung,
                "count": count,
                "part": part,
            }
        )
    return rows


def write(path: Path = OUT) -> int:
    rows = build()
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(rows)


def score(path: Path = OUT, part: str | None = None) -> dict[str, tuple[int, int]]:
    """``rung -> (correct, total)``; a counted rung is correct only with its number."""
    from qfarm.common.grounding.quantifier import classify_question_quantifier

    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if part is not None and row["part"] != part:
            continue
        info = classify_question_quantifier(row["question"])
        ok = info.intensity == row["rung"]
        if row["count"] is not None:
            ok = ok and info.explicit_count == row["count"]
        tally[row["rung"]][0] += int(ok)
        tally[row["rung"]][1] += 1
    return {rung: (c, n) for rung, (c, n) in tally.items()}


def misses(path: Path = OUT) -> list[tuple[str, str, str]]:
    from qfarm.common.grounding.quantifier import classify_question_quantifier

    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        info = classify_question_quantifier(row["question"])
        got = f"{info.intensity.value}" + (f" {info.explicit_count}" if info.explicit_count else "")
        want = row["rung"] + (f" {row['count']}" if row["count"] else "")
        if got != want:
            out.append((row["question"], want, got))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--score", action="store_true", help="score the classifier on the file")
    args = parser.parse_args(argv)
    if not args.score:
        print(f"wrote {write()} phrasings to {OUT}")
        return 0
    for part in ("tune", "heldout", None):
        result = score(part=part)
        print(f"\n{part or 'whole file'}:\n")
        print("| rung | correct / phrasings | accuracy |")
        print("|---|---|---|")
        for rung in CARRIERS:
            if rung in result:
                c, n = result[rung]
                print(f"| {rung} | {c} / {n} | {c / n:.2f} |")
        total_c = sum(c for c, _ in result.values())
        total_n = sum(n for _, n in result.values())
        print(f"| all | {total_c} / {total_n} | {total_c / total_n:.2f} |")
    wrong = Counter(w for _, w, _ in misses())
    for question, want, got in misses():
        print(f"miss: {question!r}: want {want}, got {got}")
    print(f"misses by expected rung: {dict(sorted(wrong.items()))}")
    print(f"quantifier_phrasings_accuracy={total_c / total_n:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
