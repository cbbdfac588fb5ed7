from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from common import search_query as sq
from common.versions import CHUNKER_VERSION


def test_query_terms_drop_stop_words_and_repeats() -> None:
    assert sq.query_terms("Who were the members of the Beatles? The BEATLES!") == [
        "members",
        "beatles",
    ]


def test_query_terms_fall_back_to_all_words_when_all_are_stop_words() -> None:
    assert sq.query_terms("The Who") == ["the", "who"]
    assert sq.query_terms("?!") == []


def test_query_terms_normalize_unicode_and_split_underscores() -> None:
    assert sq.query_terms("ＦＵＬＬ width café snake_case") == [
        "full",
        "width",
        "café",
        "snake",
        "case",
    ]


NASTY = [
    'title: "Beatles',
    "beatles AND OR NOT NEAR(a b, 3)",
    "* ^ - + ( ) { } : \"\" '' band",
    "NEAR",
    "text:liverpool OR",
    "\x00 nul \u200b zero-width",
    "emoji 🎸 band",
]


@pytest.mark.parametrize("question", NASTY)
def test_fts5_expression_never_breaks_a_query(question: str) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(title, text, tokenize='porter unicode61')")
    conn.execute(
        "INSERT INTO t VALUES ('The Beatles', 'A band from Liverpool, near the text and title.')"
    )
    expr = sq.fts5_match_expression(question)
    assert expr is not None
    conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,)).fetchall()  # no OperationalError


def test_fts5_expression_quotes_each_term_and_ors_them() -> None:
    assert sq.fts5_match_expression("Beatles and Liverpool") == '"beatles" OR "liverpool"'
    assert sq.fts5_match_expression("...") is None


def test_index_body_matches_the_embedded_ranking_shape() -> None:
    body = sq.index_body(shards=3, replicas=2, meta={"index_version": "v"})
    props = body["mappings"]["properties"]
    assert props["title"] == {"type": "text", "analyzer": "english"}
    assert props["text"] == {"type": "text", "analyzer": "english"}
    assert props["doc_id"]["type"] == props["chunk_id"]["type"] == "keyword"
    assert set(sq.SOURCE_FIELDS) == set(props)
    assert body["mappings"]["dynamic"] == "strict"
    assert body["mappings"]["_meta"] == {"index_version": "v"}
    index = body["settings"]["index"]
    assert index["number_of_shards"] == 3
    assert index["similarity"]["default"] == {"type": "BM25", "k1": 1.2, "b": 0.75}
    # While bulk loading: no refresh, no replicas; replicas come back in serving_settings.
    assert index["refresh_interval"] == "-1" and index["number_of_replicas"] == 0
    assert sq.serving_settings(replicas=2)["index"]["number_of_replicas"] == 2
    assert (
        sq.index_body(replicas=2, bulk_loading=False)["settings"]["index"]["number_of_replicas"]
        == 2
    )


def test_template_matches_every_version_of_the_alias() -> None:
    template = sq.index_template_body("QFarm-Passages", shards=2)
    assert template["index_patterns"] == ["qfarm-passages-*"]
    assert "_meta" not in template["template"]["mappings"]
    assert template["template"]["settings"]["index"]["number_of_shards"] == 2


def test_search_body_is_combined_fields_with_the_policy_boost_and_top_k() -> None:
    # BM25F (one IDF and one length over title+text), not per-field scores added.
    body = sq.search_body("Who were the Beatles?", top_k=5, title_boost=2.5)
    assert body is not None
    cf = body["query"]["combined_fields"]
    assert cf["query"] == "beatles"
    assert cf["fields"] == ["title^2.5", "text"]
    assert cf["operator"] == "or"
    assert body["size"] == 5
    assert body["_source"] == list(sq.SOURCE_FIELDS)


def test_search_body_cross_fields_for_servers_without_combined_fields() -> None:
    body = sq.search_body("Who were the Beatles?", top_k=5, title_boost=2.0, query_type="cross_fields")
    assert body is not None
    mm = body["query"]["multi_match"]
    assert (mm["type"], mm["fields"], mm["query"]) == ("cross_fields", ["title^2", "text"], "beatles")
    with pytest.raises(ValueError, match="query_type"):
        sq.search_body("beatles", top_k=5, title_boost=2.0, query_type="most_fields")


def test_a_title_weight_below_one_becomes_a_text_weight() -> None:
    # combined_fields refuses boosts < 1; the ratio title:text is kept.
    body = sq.search_body("beatles", top_k=5, title_boost=0.5)
    assert body is not None
    assert body["query"]["combined_fields"]["fields"] == ["title", "text^2"]


def test_search_body_with_doc_filter_and_without_words() -> None:
    body = sq.search_body("beatles", top_k=3, title_boost=2.0, doc_ids=["a", "b"])
    assert body is not None
    assert body["query"]["bool"]["filter"] == [{"terms": {"doc_id": ["a", "b"]}}]
    assert body["query"]["bool"]["must"][0]["combined_fields"]["query"] == "beatles"
    assert sq.search_body("?", top_k=3, title_boost=2.0) is None


def test_msearch_body_pairs_a_header_with_each_body() -> None:
    bodies = [{"size": 1}, {"size": 2}]
    assert sq.msearch_body("alias", bodies) == [
        {"index": "alias"},
        {"size": 1},
        {"index": "alias"},
        {"size": 2},
    ]


def test_evidence_from_hits_numbers_in_rank_order() -> None:
    hits = [
        {
            "_score": 9.5,
            "_source": {
                "doc_id": "B",
                "chunk_id": "B#0",
                "title": "The Beatles",
                "text": "t0",
                "offset_start": 0,
                "offset_end": 2,
            },
        },
        {
            "_score": 3.0,
            "_source": {
                "doc_id": "L",
                "chunk_id": "L#1",
                "title": "Liverpool",
                "text": "t1",
                "offset_start": 700,
                "offset_end": 702,
            },
        },
    ]
    evidence = sq.evidence_from_hits(hits)
    assert [e.id for e in evidence] == ["E1", "E2"]
    assert evidence[1].model_dump() == {
        "id": "E2",
        "doc_id": "L",
        "chunk_id": "L#1",
        "title": "Liverpool",
        "text": "t1",
        "score": 3.0,
        "offset_start": 700,
        "offset_end": 702,
    }


def test_index_names_and_alias_switch() -> None:
    version = sq.index_version_for("ABCDEF0123456789" * 4)
    assert version == f"ABCDEF012345-{CHUNKER_VERSION}-{sq.RANKING_VERSION}"
    name = sq.versioned_index_name("QFarm", version)
    assert name == name.lower() and name.startswith("qfarm-abcdef012345-")
    assert sq.is_versioned_index_of("qfarm", name)
    assert not sq.is_versioned_index_of("qfarm", "qfarm")
    actions = sq.alias_switch_actions("qfarm", "qfarm-new", ["qfarm-old", "qfarm-new"])["actions"]
    assert actions == [
        {"remove": {"index": "qfarm-old", "alias": "qfarm"}},
        {"add": {"index": "qfarm-new", "alias": "qfarm"}},
    ]


def test_ops_template_file_matches_the_generated_mapping() -> None:
    """ops/search/passages-template.json is what operators install; it must not drift."""
    path = Path(__file__).resolve().parents[2] / "ops" / "search" / "passages-template.json"
    on_disk = json.loads(path.read_text(encoding="utf-8"))
    assert on_disk == sq.index_template_body("qfarm-passages", shards=1, replicas=1)


def test_conversational_frame_words_are_not_query_terms() -> None:
    # "know"/"everything" matched a short unrelated passage above *Volcano*.
    assert sq.query_terms("Tell me everything you know about volcanoes.") == ["volcanoes"]
