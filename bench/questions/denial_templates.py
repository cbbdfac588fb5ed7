"""Denials and legitimate negations built from slot templates, apart from the grammar.

A second measure of the sidecar's clause A (a denial of the answer), made by another
method than ``denial_phrasings``: not whole hand-written sentences but templates with
slots (the question's things, its subject's pronoun, a source noun, an object
phrase), filled for ten questions whose answer types and wording differ from that
file's six. The templates were written before their author read the grammar's word
tables, and the held-out templates (``HELDOUT_*``) were written at the same time with
other structures and words; ``denial_templates_heldout.jsonl`` is never used to change
the grammar.

Each line: ``question``, ``answer``, ``denial`` (does the answer deny the answer to
the question?), ``kind`` and ``template``.

    python -m bench.questions.denial_templates          # writes both files
    python -m bench.questions.denial_templates --score  # recall and precision of clause A
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
TUNE_OUT = HERE / "denial_templates.jsonl"
HELDOUT_OUT = HERE / "denial_templates_heldout.jsonl"

# question, its things (plural), subject pronoun, possessive, object pronoun, subject's name,
# the thing's verb (past), and a fact that answers it (for the partial-denial negatives)
QUESTIONS: tuple[dict[str, str], ...] = (
    {"q": "What ballets did Pyotr Ilyich Tchaikovsky compose?", "things": "ballets",
     "pron": "he", "poss": "his", "name": "Tchaikovsky", "verb": "composed",
     "fact": "Tchaikovsky composed Swan Lake and The Nutcracker [E1].", "detail": "when each ballet premiered"},
    {"q": "What poetry collections did Sylvia Plath publish?", "things": "poetry collections",
     "pron": "she", "poss": "her", "name": "Plath", "verb": "published",
     "fact": "Sylvia Plath published The Colossus and Ariel [E2].", "detail": "how many copies they sold"},
    {"q": "Which essays did George Orwell write?", "things": "essays", "pron": "he",
     "poss": "his", "name": "Orwell", "verb": "wrote",
     "fact": "Orwell wrote Politics and the English Language and Shooting an Elephant [E1].",
     "detail": "where they were first printed"},
    {"q": "Which short stories did Alice Munro write?", "things": "short stories", "pron": "she",
     "poss": "her", "name": "Munro", "verb": "wrote",
     "fact": "Alice Munro wrote Runaway and The Bear Came Over the Mountain [E3].",
     "detail": "the publication dates"},
    {"q": "What are Daphne du Maurier's best-known novels?", "things": "novels", "pron": "she",
     "poss": "her", "name": "du Maurier", "verb": "wrote",
     "fact": "Daphne du Maurier's best-known novels are Rebecca and Jamaica Inn [E1].",
     "detail": "their sales figures"},
    {"q": "Which albums did Fleetwood Mac release?", "things": "albums", "pron": "they",
     "poss": "their", "name": "Fleetwood Mac", "verb": "released",
     "fact": "Fleetwood Mac released Rumours and Tusk [E2].", "detail": "the chart positions"},
    {"q": "Which films did Akira Kurosawa direct?", "things": "films", "pron": "he",
     "poss": "his", "name": "Kurosawa", "verb": "directed",
     "fact": "Akira Kurosawa directed Rashomon and Seven Samurai [E1].", "detail": "their budgets"},
    {"q": "What operas did Giuseppe Verdi write?", "things": "operas", "pron": "he",
     "poss": "his", "name": "Verdi", "verb": "wrote",
     "fact": "Verdi wrote Aida and La traviata [E4].", "detail": "who sang the premieres"},
    {"q": "Who designed the Sydney Opera House?", "things": "designer", "pron": "it",
     "poss": "its", "name": "the Sydney Opera House", "verb": "designed",
     "fact": "Jørn Utzon designed the Sydney Opera House [E1].", "detail": "what it cost"},
    {"q": "Who painted the Mona Lisa?", "things": "painter", "pron": "it", "poss": "its",
     "name": "the Mona Lisa", "verb": "painted",
     "fact": "Leonardo da Vinci painted the Mona Lisa [E1].", "detail": "what it cost"},
)
PERSON_QUESTIONS = {"designer", "painter"}

# Objects of a denial: what the answer says is missing (list questions / who-questions).
LIST_OBJECTS = (
    "{poss} {things}", "any of {poss} {things}", "which {things} {pron} {verb}",
    "the titles of {poss} {things}", "specific {things}", "the names of {poss} {things}",
)
PERSON_OBJECTS = ("who {verb} {name}", "the {things}", "the name of the {things}",
                  "who the {things} was")  # fmt: skip
# plural, so one verb form fits every template
SOURCES = ("the passages", "the provided snippets", "these excerpts", "the documents",
           "the retrieved texts", "the sources given", "the evidence blocks")  # fmt: skip

TUNE_DENIALS = (
    "I wasn't able to locate {obj} in {src}.",
    "I couldn't locate {obj} in {src}.",
    "No titles are given in {src}.",
    "There doesn't seem to be anything in {src} about {obj}.",
    "{Src} don't name {obj}.",
    "{Src} do not actually list {obj}.",
    "Nothing here tells me {obj}.",
    "There is nothing in {src} that tells me {obj}.",
    "{Src} describe {name}, but I'm not seeing {obj}.",
    "{Src} talk about {name}, but they don't go into {obj}.",
    "It doesn't go into {obj}.",
    "Unfortunately, {obj} aren't named anywhere in {src}.",
    "There are no specific {things} listed for {name}.",
    "Not mentioned.",
    "I can't find {obj} in {src}.",
    "{Src} contain no information about {obj}.",
    "I was unable to identify {obj} from {src}.",
    "Sorry, {src} don't give {obj}.",
)
HELDOUT_DENIALS = (
    "I have no information about {obj} from {src}.",
    "That information isn't available in {src}.",
    "{Src} are silent on {obj}.",
    "I don't see {obj} anywhere in {src}.",
    "There's no record of {obj} in {src}.",
    "{Obj_cap} can't be found in the material provided.",
    "I'm afraid {src} never actually list {obj}.",
    "Sadly, {src} offer nothing on {obj}.",
    "{Src} do not include {obj}.",
    "Based on {src}, I cannot tell you {obj}.",
    "{Src} focus on {name}'s background and leave out {obj}.",
    "Regrettably, {obj} are not covered by {src}.",
    "There is no list of {obj} here.",
    "{Src} lack any details on {obj}.",
    "I could not spot {obj} in {src}.",
    "None of {src} names {obj}.",
)
# Negations that deny nothing the question asks: partial denials of a detail after the
# answer, negative facts, idioms. ``{fact}`` is a correct, cited answer.
TUNE_NEGATIONS = (
    "{fact} I couldn't find anything about {detail}.",
    "{fact} {Src} don't say {detail}.",
    "{fact} {Src} do not mention {detail}.",
    "{fact} There is no information on {detail}.",
    "{name_cap} did not stop working until late in life [E1].",
    "{fact} It was not an immediate success [E2].",
    "{fact} The evidence is not clear about {detail}.",
    "There is no doubt about it: {fact}",
)
HELDOUT_NEGATIONS = (
    "{fact} However, I wasn't able to locate {detail}.",
    "{fact} {Src} are silent on {detail}.",
    "{fact} Nothing in {src} tells me {detail}.",
    "{fact} {Detail_cap} isn't given in {src}.",
    "{fact} Not everyone admired the work at first [E2].",
    "{fact} No other details are needed here.",
    "{fact} I don't see {detail} anywhere in {src}.",
    "{name_cap} never stopped revising [E3]. {fact}",
)


def _digest(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _fill(template: str, q: dict[str, str], obj: str, src: str) -> str:
    slots = dict(q, obj=obj, src=src, Src=_cap(src), Obj_cap=_cap(obj), pron_cap=_cap(q["pron"]),
                 name_cap=_cap(q["name"]), Detail_cap=_cap(q["detail"]))  # fmt: skip
    return template.format(**slots)


def _object(q: dict[str, str], key: str) -> str:
    objects = PERSON_OBJECTS if q["things"] in PERSON_QUESTIONS else LIST_OBJECTS
    return objects[_digest(key) % len(objects)].format(**q)


def build(denials: tuple[str, ...], negations: tuple[str, ...], part: str) -> list[dict]:
    """Every template × every question, its object and source picked by a digest."""
    rows = []
    for kind, templates, label in (("denial", denials, True), ("negation", negations, False)):
        for t_i, template in enumerate(templates):
            for q_i, q in enumerate(QUESTIONS):
                key = f"{part}|{template}|{q['q']}"
                obj = _object(q, key)
                src = SOURCES[_digest(key + "src") % len(SOURCES)]
                rows.append({
                    "id": f"dt-{part}-{kind}-{t_i:02d}-{q_i}", "question": q["q"],
                    "answer": _fill(template, q, obj, src), "denial": label, "kind": kind,
                    "template": t_i,
                })  # fmt: skip
    return rows


def write() -> tuple[int, int]:
    tune = build(TUNE_DENIALS, TUNE_NEGATIONS, "tune")
    heldout = build(HELDOUT_DENIALS, HELDOUT_NEGATIONS, "heldout")
    for path, rows in ((TUNE_OUT, tune), (HELDOUT_OUT, heldout)):
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return len(tune), len(heldout)


def fires(question: str, answer: str) -> bool:
    """Clause A as the sidecar runs it: a denial of the answer, not of a detail."""
    from qfarm.common.grounding.sidecar import denial_of_answer

    return denial_of_answer(question, answer) is not None


def score(path: Path) -> dict[str, int]:
    counts = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        hit = fires(row["question"], row["answer"])
        counts[("tp" if hit else "fn") if row["denial"] else ("fp" if hit else "tn")] += 1
    return counts


def rates(counts: dict[str, int]) -> tuple[float, float]:
    recall = counts["tp"] / max(1, counts["tp"] + counts["fn"])
    precision = counts["tp"] / max(1, counts["tp"] + counts["fp"])
    return recall, precision


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--score", action="store_true", help="score clause A on both files")
    parser.add_argument("--errors", action="store_true", help="list the tuning file's errors")
    args = parser.parse_args(argv)
    if not args.score and not args.errors:
        n_tune, n_held = write()
        print(f"wrote {n_tune} answers to {TUNE_OUT.name} and {n_held} to {HELDOUT_OUT.name}")
        return 0
    if args.errors:  # the tuning file only: the held-out file's errors are not for reading
        for line in TUNE_OUT.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if fires(row["question"], row["answer"]) != row["denial"]:
                print(f"{row['kind']}: {row['question']} | {row['answer']}")
        return 0
    print("| file | denials | negations | recall | precision | false positives |")
    print("|---|---|---|---|---|---|")
    for path in (TUNE_OUT, HELDOUT_OUT):
        c = score(path)
        recall, precision = rates(c)
        print(f"| {path.name} | {c['tp'] + c['fn']} | {c['fp'] + c['tn']} | {recall:.3f} | "
              f"{precision:.3f} | {c['fp']} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
