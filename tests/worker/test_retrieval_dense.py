"""The opt-in dense stage: the NumPy encoder against sentence-transformers, and a real index.

The tests that need the model skip when it is not installed (`make install-dense`),
unless QFARM_REQUIRE_DENSE=1 (.ci/run sets it): then a missing model fails them.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from qfarm.common.errors import ConfigError, RetrievalError
from qfarm.common.retrieval.ranking import DENSE_RANKING_VERSION, RANKING_VERSION
from qfarm.common.settings import Settings
from qfarm.worker.retrieval import dense, open_retriever
from qfarm.worker.retrieval.embedded import EmbeddedRetriever, read_meta
from qfarm.worker.retrieval.ingest import CorpusSource, build_embedded_index

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"
DOCS = [
    ("1", "Pediatrics", "Pediatrics is the branch of medicine that involves the medical care of "
     "infants, kids, adolescents, and young adults."),
    ("2", "Physician", "A physician is a health professional who practices medicine. Physicians "
     "treat patients of all ages and study disease."),
    ("3", "Child labour", "Child labour refers to the exploitation of children through any form "
     "of work that deprives them of their childhood."),
    ("4", "Volcano", "A volcano is a rupture in the crust of a planetary-mass object that allows "
     "hot lava, volcanic ash, and gases to escape."),
    ("5", "Hummus", "Hummus is a Middle Eastern dip made from cooked, mashed chickpeas blended "
     "with tahini, lemon juice, and garlic."),
]  # fmt: skip


def _model_or_skip() -> Path:
    try:
        return dense.locate_model()
    except ConfigError as exc:
        if os.environ.get("QFARM_REQUIRE_DENSE") == "1":
            pytest.fail(f"QFARM_REQUIRE_DENSE=1 but {exc}")
        pytest.skip(f"dense model not installed: {exc}")


@pytest.fixture(scope="module")
def encoder() -> dense.DenseEncoder:
    return dense.encoder_at(_model_or_skip())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> CorpusSource:
    path = tmp_path_factory.mktemp("dense") / "corpus.jsonl"
    path.write_text(
        "".join(json.dumps({"id": i, "title": t, "text": x}) + "\n" for i, t, x in DOCS),
        encoding="utf-8",
    )
    return CorpusSource.resolve(path)


@pytest.fixture(scope="module")
def indexes(
    corpus: CorpusSource, encoder: dense.DenseEncoder, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path]:
    """(lexical index, dense index) of the same five documents."""
    where = tmp_path_factory.mktemp("indexes")
    lexical, with_vectors = where / "lexical.sqlite", where / "dense.sqlite"
    build_embedded_index(corpus, lexical, progress=False)
    build_embedded_index(corpus, with_vectors, progress=False, encoder=encoder)
    return lexical, with_vectors


# --------------------------------------------------------------------------- the encoder


def test_encoder_matches_sentence_transformers(encoder: dense.DenseEncoder) -> None:
    reference = json.loads(REFERENCE.read_text(encoding="utf-8"))
    ours = encoder.encode(reference["texts"])
    assert ours.dtype == np.float32
    assert np.abs(ours - np.array(reference["vectors"])).max() < 1e-5
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_a_batch_encodes_each_text_as_it_would_alone(encoder: dense.DenseEncoder) -> None:
    # Texts of different lengths share a padded batch: the mask must keep padding out.
    texts = ["short", "a much longer text about volcanoes, lava and ash clouds over the crust", "mid size"]
    together = encoder.encode(texts, batch_size=3)
    alone = np.stack([encoder.encode([t])[0] for t in texts])
    assert np.abs(together - alone).max() < 1e-5


def test_erf_matches_the_standard_library_in_float32() -> None:
    xs = np.linspace(-5.0, 5.0, 2001, dtype=np.float32)
    ours = dense.erf(xs)
    assert ours.dtype == np.float32  # a float64 result would send the encoder off BLAS
    assert np.abs(ours - np.array([math.erf(float(x)) for x in xs])).max() < 5e-7


# --------------------------------------------------------------------------- the index


def test_dense_index_finds_a_passage_that_shares_no_word_with_the_question(
    indexes: tuple[Path, Path],
) -> None:
    lexical_path, dense_path = indexes
    question = "Which doctor looks after sick children?"  # Pediatrics says "medical care of kids"
    lexical = EmbeddedRetriever(lexical_path).search(question, top_k=5, title_boost=2.0)
    fused = EmbeddedRetriever(dense_path).search(question, top_k=5, title_boost=2.0)
    assert "Pediatrics" not in [e.title for e in lexical]
    assert "Pediatrics" in [e.title for e in fused]
    # Every lexical hit is kept: fusion adds to the lexical list, it does not replace it.
    assert {e.chunk_id for e in lexical} <= {e.chunk_id for e in fused}
    assert [e.id for e in fused] == [f"E{i}" for i in range(1, len(fused) + 1)]
    assert [e.score for e in fused] == sorted((e.score for e in fused), reverse=True)


def test_dense_index_names_its_ranking_and_model(indexes: tuple[Path, Path]) -> None:
    lexical_path, dense_path = indexes
    lexical, fused = EmbeddedRetriever(lexical_path), EmbeddedRetriever(dense_path)
    assert lexical.index_version().endswith(f"-{RANKING_VERSION}")
    assert fused.index_version().endswith(f"-{DENSE_RANKING_VERSION}")
    assert fused.describe()["dense_model"].startswith(f"{dense.MODEL_NAME}@")
    assert "dense_model" not in lexical.describe()
    rows = sqlite3.connect(dense_path).execute("SELECT count(*) FROM passage_vectors").fetchone()
    assert rows == (len(DOCS),)


def test_dense_results_respect_the_document_filter(indexes: tuple[Path, Path]) -> None:
    evidence = EmbeddedRetriever(indexes[1]).search(
        "Which doctor looks after sick children?", top_k=5, title_boost=2.0, doc_ids=["4", "5"]
    )
    assert evidence  # the dense list has something even where no word matches
    assert {e.doc_id for e in evidence} <= {"4", "5"}


def test_an_index_encoded_with_another_model_is_refused(indexes: tuple[Path, Path], tmp_path: Path) -> None:
    copy = tmp_path / "other-model.sqlite"
    copy.write_bytes(indexes[1].read_bytes())
    conn = sqlite3.connect(copy)
    conn.execute("UPDATE meta SET value = 'all-MiniLM-L6-v2@000000000000' WHERE key = 'dense_model'")
    conn.commit()
    conn.close()
    with pytest.raises(RetrievalError, match="qfarm index --dense --force"):
        EmbeddedRetriever(copy).search("volcano", top_k=3, title_boost=2.0)


def test_indexing_without_dense_keeps_the_vectors_unless_forced(
    corpus: CorpusSource, indexes: tuple[Path, Path], tmp_path: Path
) -> None:
    path = tmp_path / "index.sqlite"
    path.write_bytes(indexes[1].read_bytes())
    kept = build_embedded_index(corpus, path, progress=False)  # `qfarm index`, as make run does
    assert not kept.built and kept.index_version.endswith(f"-{DENSE_RANKING_VERSION}")
    assert "dense_model" in EmbeddedRetriever(path).describe()
    rebuilt = build_embedded_index(corpus, path, progress=False, force=True)
    assert rebuilt.built and rebuilt.index_version.endswith(f"-{RANKING_VERSION}")
    assert "dense_model" not in EmbeddedRetriever(path).describe()


def _vectors(path: Path) -> dict[str, bytes]:
    conn = sqlite3.connect(path)
    rows = conn.execute(
        "SELECT p.chunk_id, v.vector FROM passages AS p JOIN passage_vectors AS v ON v.rowid = p.rowid"
    ).fetchall()
    conn.close()
    return dict(rows)


def test_a_rebuild_reuses_the_vectors_of_unchanged_passages(
    encoder: dense.DenseEncoder, indexes: tuple[Path, Path], tmp_path: Path
) -> None:
    # One article changed, one added: a new corpus digest, so a new index version.
    docs = [d if d[0] != "4" else ("4", "Volcano", "A volcano is a vent where lava erupts.")
            for d in DOCS] + [("6", "Lava", "Lava is molten rock expelled by a volcano.")]  # fmt: skip
    changed = tmp_path / "corpus.jsonl"
    changed.write_text(
        "".join(json.dumps({"id": i, "title": t, "text": x}) + "\n" for i, t, x in docs),
        encoding="utf-8",
    )
    path = tmp_path / "index.sqlite"
    path.write_bytes(indexes[1].read_bytes())
    old = _vectors(path)
    report = build_embedded_index(CorpusSource.resolve(changed), path, progress=False, encoder=encoder)
    assert report.built and report.vectors_reused == len(DOCS) - 1  # all but Volcano's
    new = _vectors(path)
    assert len(new) == report.passages == len(docs)
    assert all(new[c] == old[c] for c in old if not c.startswith("4#"))
    # The encoded ones are what a build from nothing stores.
    fresh = tmp_path / "fresh.sqlite"
    built = build_embedded_index(CorpusSource.resolve(changed), fresh, progress=False, encoder=encoder)
    assert built.vectors_reused == 0
    for chunk_id, vector in _vectors(fresh).items():
        ours = np.frombuffer(new[chunk_id], dtype="<f4")
        assert np.abs(ours - np.frombuffer(vector, dtype="<f4")).max() < 1e-6
    # --force encodes everything again; another model's vectors are never taken.
    forced = build_embedded_index(CorpusSource.resolve(changed), path, progress=False,
                                  encoder=encoder, force=True)  # fmt: skip
    assert forced.built and forced.vectors_reused == 0
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = 'x' WHERE key = 'index_version'")
    conn.execute("UPDATE meta SET value = 'all-MiniLM-L6-v2@000000000000' WHERE key = 'dense_model'")
    conn.commit()
    conn.close()
    other = build_embedded_index(CorpusSource.resolve(changed), path, progress=False, encoder=encoder)
    assert other.built and other.vectors_reused == 0


class _CountingEncoder:
    """Stands in for the model where only what gets encoded matters (no model needed)."""

    model_id = "stub@000000000000"
    dimensions = 4

    def __init__(self) -> None:
        self.encoded = 0

    def encode(self, texts: list[str], **_: object) -> np.ndarray:
        self.encoded += len(texts)
        return np.ones((len(texts), self.dimensions), dtype=np.float32)


def test_the_default_index_rebuilt_for_a_new_version_keeps_its_vectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from qfarm.worker.retrieval.ingest import ensure_default_index

    stub = _CountingEncoder()
    monkeypatch.setattr(dense, "open_encoder", lambda *_: stub)
    settings = Settings(data_dir=tmp_path, dense=True)
    path = ensure_default_index(settings, progress=False)
    first = stub.encoded
    assert first > 10_000
    conn = sqlite3.connect(path)  # as if built under an older ranking version
    conn.execute("UPDATE meta SET value = 'older' WHERE key = 'index_version'")
    conn.commit()
    conn.close()
    ensure_default_index(settings, progress=False)
    assert (read_meta(path) or {}).get("index_version") != "older"  # rebuilt ...
    assert stub.encoded == first  # ... without encoding a passage again


# --------------------------------------------------------------------------- configuration errors


def test_a_model_folder_without_its_files_is_named(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"QFARM_DENSE_MODEL=.*tokenizer\.json, model\.safetensors"):
        dense.locate_model(tmp_path)


def test_no_installed_model_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dense.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="make install-dense"):
        dense.locate_model()


def test_a_cluster_backend_refuses_the_dense_setting(tmp_path: Path) -> None:
    settings = Settings(retriever="opensearch", dense=True, data_dir=tmp_path)
    with pytest.raises(ConfigError, match="embedded index only"):
        open_retriever(settings)


def test_a_worker_without_the_model_fails_at_start_but_the_viewer_reads_passages(
    indexes: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dense.importlib.util, "find_spec", lambda name: None)
    settings = Settings(retriever="embedded", index_path=indexes[1], data_dir=tmp_path)
    with pytest.raises(ConfigError, match="make install-dense"):
        open_retriever(settings)
    # The viewer opens the index for passages only: no model needed.
    passages = EmbeddedRetriever(indexes[1]).passages(["1#0"])
    assert passages["1#0"].title == "Pediatrics"


@pytest.mark.slow
def test_an_eager_sweep_on_a_dense_index_records_the_fused_ranking(
    indexes: tuple[Path, Path], tmp_path: Path
) -> None:
    from qfarm.ops.sim.launch import start_simulator
    from qfarm.producer import SweepSpec, run_sweep

    with start_simulator(max_num_seqs=4, ttft_ms=0, tpot_ms=0) as sim:
        settings = Settings(llm_endpoints=sim.url, index_path=indexes[1],
                            results_dir=tmp_path / "results", data_dir=tmp_path)  # fmt: skip
        result = run_sweep(
            SweepSpec(questions=["Which doctor looks after sick children?"], modes=["quote"], n=2),
            eager=True,
            settings=settings,
        )
    rows = result.rows()
    assert result.status == "complete" and len(rows) == 2
    for row in rows:
        assert row.error is None
        assert row.index_version.endswith(f"-{DENSE_RANKING_VERSION}")
        assert "Pediatrics" in row.top_doc_titles


@pytest.mark.parametrize(
    "damage",
    [
        "DELETE FROM passage_vectors WHERE rowid = (SELECT max(rowid) FROM passage_vectors)",
        "UPDATE passage_vectors SET vector = substr(vector, 1, 100) WHERE rowid = 1",
    ],
)
def test_missing_or_cut_vectors_are_refused_with_the_rebuild_command(
    indexes: tuple[Path, Path], tmp_path: Path, damage: str
) -> None:
    copy = tmp_path / "damaged.sqlite"
    copy.write_bytes(indexes[1].read_bytes())
    conn = sqlite3.connect(copy)
    conn.execute(damage)
    conn.commit()
    conn.close()
    with pytest.raises(RetrievalError, match=r"passage vectors for 5 passages.*qfarm index --dense --force"):
        EmbeddedRetriever(copy).search("volcano", top_k=3, title_boost=2.0)


def test_the_default_index_with_vectors_is_kept_when_qfarm_dense_is_unset(
    default_index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `qfarm index --dense` took minutes; a later sweep without QFARM_DENSE must not rebuild
    # it without vectors. An index whose meta says "dense" stands in (no 7-minute encode here).
    from qfarm.worker.retrieval import ensure_default_index

    source = CorpusSource.resolve("default")
    dense_version = source.index_version_with(dense=True)
    path = tmp_path / "index" / "default.sqlite"
    path.parent.mkdir()
    path.write_bytes(default_index.read_bytes())
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'index_version'", (dense_version,))
    conn.commit()
    conn.close()
    before = path.stat().st_mtime_ns
    assert ensure_default_index(Settings(data_dir=tmp_path), progress=False) == path
    assert path.stat().st_mtime_ns == before  # kept, not rebuilt

    # With QFARM_DENSE=1 a lexical default index is rebuilt with the encoder.
    lexical = tmp_path / "lexical" / "index" / "default.sqlite"
    lexical.parent.mkdir(parents=True)
    lexical.write_bytes(default_index.read_bytes())

    class Asked(Exception):
        pass

    def no_encoder(explicit: Path | None = None) -> dense.DenseEncoder:
        raise Asked

    monkeypatch.setattr(dense, "open_encoder", no_encoder)
    with pytest.raises(Asked):
        ensure_default_index(Settings(data_dir=tmp_path / "lexical", dense=True), progress=False)
