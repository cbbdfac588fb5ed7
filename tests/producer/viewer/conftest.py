"""Real runs for the viewer's tests: a small corpus indexed by the embedded backend, and rows
made by the pipeline's own stages (preflight, retrieval, verification, the row), with
answers written here instead of a model's, so each row's verdict and spans are known."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from qfarm.common.models import Evidence, Generation, JobRecord, LlmRequest, Manifest, Row, Usage
from qfarm.common.policy import build_policy
from qfarm.common.vocab import Mode

DOCS = [
    {"id": "seine", "title": "Seine",
     "text": "The Seine is a river in northern France. The Seine flows through Paris and into "
             "the English Channel at Le Havre. It is 777 kilometres long."},
    {"id": "everest", "title": "Mount Everest",
     "text": "Mount Everest is the highest mountain on Earth above sea level. It lies in the "
             "Mahalangur Himal range of the Himalayas on the border between Nepal and China."},
    {"id": "curie", "title": "Marie Curie",
     "text": "Marie Curie was a Polish and naturalised French physicist and chemist. She was the "
             "first woman to win a Nobel Prize and the only person to win Nobel Prizes in two "
             "sciences."},
    {"id": "danube", "title": "Danube",
     "text": "The Danube is the second-longest river in Europe. The Danube passes through "
             "Vienna, Budapest and Belgrade before it reaches the Black Sea."},
    {"id": "beatles", "title": "The Beatles",
     "text": 'The Beatles were an English rock band from Liverpool. Their albums include '
             '"Abbey Road", "Revolver" and "Let It Be".'},
    {"id": "rhine", "title": "Rhine",
     "text": "The Rhine rises in the Swiss Alps and flows through Germany and the Netherlands "
             "to the North Sea."},
]

# (question id, question, mode, answer); {seine} etc. become the evidence id of that document.
PARIS = "Which river flows through Paris?"
CASES: list[tuple[str, str, Mode, str]] = [
    ("q1", PARIS, Mode.CLAIM_LATTICE_POINTER,
     "The Seine flows through Paris and into the English Channel. [{seine}]\n"
     "Mount Everest is the highest mountain on Earth. [{seine}]"),
    ("q1", PARIS, Mode.QUOTE,
     '"The Seine flows through Paris and into the English Channel" [{seine}]'),
    ("q1", PARIS, Mode.CLAIM_LATTICE, json.dumps({"claims": [{
        "claim": "The Seine flows through Paris.", "evidence": ["{seine}"],
        "warrant": "The Seine flows through Paris and into the English Channel"}]})),
    ("q2", "Who was the first woman to win a Nobel Prize?", Mode.CLAIM_LATTICE_POINTER,
     "Marie Curie was the first woman to win a Nobel Prize. [{curie}]"),
    ("q2", "Who was the first woman to win a Nobel Prize?", Mode.QUOTE,
     '"She was the first woman to win a Nobel Prize" [{curie}]'),
    ("q2", "Who was the first woman to win a Nobel Prize?", Mode.CLAIM_LATTICE, json.dumps({
        "claims": [{"claim": "Marie Curie was the first woman to win a Nobel Prize.",
                    "evidence": ["{curie}"],
                    "warrant": "She was the first woman to win a Nobel Prize"}]})),
    ("q3", "Which albums did the Beatles release?", Mode.CLAIM_LATTICE_POINTER,
     "The evidence does not say which albums the Beatles released."),
    ("q3", "Which albums did the Beatles release?", Mode.QUOTE,
     '"their albums include Abbey Road" [{beatles}]'),
    ("q3", "Which albums did the Beatles release?", Mode.CLAIM_LATTICE, json.dumps({
        "claims": [{"claim": "The Beatles were a rock band from Liverpool.",
                    "evidence": ["{beatles}"], "warrant": "an English rock band"}]})),
]


# Gold answers of the cases' questions (q3 has none): rows record whether each was matched.
GOLD = {"q1": ("Seine",), "q2": ("Marie Curie",)}


def write_question_file(path: Path) -> tuple[str, str]:
    """The cases' questions with their gold answers as a JSONL file; (its path, its digest)."""
    from qfarm.common.questions import digest_content

    seen = dict.fromkeys((qid, text) for qid, text, _, _ in CASES)
    path.write_text("".join(json.dumps({"id": qid, "question": text, "answers": list(GOLD[qid])}
                                       if qid in GOLD else {"id": qid, "question": text}) + "\n"
                            for qid, text in seen))
    return str(path), digest_content(path.read_bytes())


def build_index(root: Path) -> Path:
    from qfarm.worker.retrieval.ingest import CorpusSource, build_embedded_index

    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    dest = root / "index.sqlite"
    build_embedded_index(CorpusSource.resolve(corpus), dest, progress=False)
    return dest


def _answer(template: str, evidence: Sequence[Evidence]) -> str:
    ids = {ev.doc_id: ev.id for ev in evidence}
    for doc in DOCS:
        key = "{" + str(doc["id"]) + "}"
        if key in template:
            assert doc["id"] in ids, f"{doc['id']} was not retrieved for this question"
            template = template.replace(key, ids[doc["id"]])
    return template


def make_rows(
    run_id: str, index: Path, answers: dict[tuple[str, Mode], str] | None = None
) -> tuple[Manifest, list[Row]]:
    """A manifest and one row per case, through the pipeline's stages on the real index."""
    from qfarm.common.jobs import expand_jobs
    from qfarm.common.models import Question
    from qfarm.producer.runs.sweep import make_manifest
    from qfarm.worker.pipeline import finish, preflight_stage, retrieval_stage, verification_stage
    from qfarm.worker.retrieval.embedded import EmbeddedRetriever

    policy = build_policy({})
    retriever = EmbeddedRetriever(index)
    modes = list(dict.fromkeys(mode for _, _, mode, _ in CASES))
    manifest = make_manifest(
        run_id=run_id, question_file="viewer-cases.txt", question_file_digest="-",
        n_questions=len({q for q, *_ in CASES}), modes=modes, n=1, policy=policy, model="m",
        endpoints=["http://sim"], simulated=True, retriever="embedded",
        index_version=retriever.index_version(), corpus=str(index), eager=True, keep_answers=True,
    )
    rows = []
    try:
        for qid, text, mode, template in CASES:
            template = (answers or {}).get((qid, mode), template)
            question = Question(id=qid, text=text, answers=GOLD.get(qid))
            job = next(iter(expand_jobs(run_id, [question], [mode], 1, policy,
                                        model="m", keep_answers=True)))
            record = preflight_stage(JobRecord(job=job, started_at=time.time()))
            [record] = retrieval_stage([record], retriever)
            evidence = record.retrieval.evidence if record.retrieval else ()
            text = _answer(template, evidence)
            usage = Usage(prompt_tokens=300 + 10 * len(evidence), completion_tokens=len(text) // 4)
            gen = Generation(text=text, endpoint="http://sim", simulated=True, usage=usage,
                             request=LlmRequest(sent_at=time.time(), ms=50.0))
            record = verification_stage(record.model_copy(update={"generation": gen}))
            rows.append(finish(record))
    finally:
        retriever.close()
    return manifest, rows


def write_run(results: Path, manifest: Manifest, rows: Sequence[Row]) -> Path:
    from qfarm.common.runstatus import StatusRecord
    from qfarm.producer.rundir import create_run_dir, write_status

    run_dir = create_run_dir(results, manifest)
    (run_dir / "rows.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows))
    write_status(run_dir, StatusRecord(status="complete", finished_at=manifest.created_at + 5))
    return run_dir


@pytest.fixture(scope="module")
def real_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_index(tmp_path_factory.mktemp("viewer-index"))


@pytest.fixture
def real_rows(real_index: Path) -> Callable[..., tuple[Manifest, list[Row]]]:
    """``make_rows`` on the module's index."""
    return lambda run_id, answers=None: make_rows(run_id, real_index, answers)


@pytest.fixture
def real_run(tmp_path: Path, real_index: Path) -> Callable[..., Path]:
    """Write a real run into ``tmp_path/results``; returns its directory."""

    def make(run_id: str, answers: dict[tuple[str, Mode], str] | None = None) -> Path:
        manifest, rows = make_rows(run_id, real_index, answers)
        return write_run(tmp_path / "results", manifest, rows)

    return make
