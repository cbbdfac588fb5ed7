from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from qfarm.common.retrieval import ranking as sq
from qfarm.common.versions import CHUNKER_VERSION


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
    path = Path(__file__).resolve().parents[3] / "ops" / "search" / "passages-template.json"
    on_disk = json.loads(path.read_text(encoding="utf-8"))
    assert on_disk == sq.index_template_body("qfarm-passages", shards=1, replicas=1)


def test_conversational_frame_words_are_not_query_terms() -> None:
    # "know"/"everything" matched a short unrelated passage above *Volcano*.
    assert sq.query_terms("Tell me everything you know about volcanoes.") == ["volcanoes"]


def test_query_phrases_are_adjacent_content_word_pairs() -> None:
    # "Pride and Prejudice": "and" sits between them, so no "pride prejudice" pair.
    assert sq.query_phrases("What is the electric plucked string instrument?") == [
        "electric plucked",
        "plucked string",
        "string instrument",
    ]
    assert sq.query_phrases("Who wrote Pride and Prejudice?") == ["wrote pride"]
    assert sq.query_phrases("...") == []


def _count(holdings: sq.Holdings, text: str) -> tuple[int, int]:
    """(distinct terms held, distinct phrases held) in ``text``."""
    held, phrases = holdings.find(text)
    return (len(held), phrases)


def test_holdings_count_terms_by_root_and_phrases_as_written() -> None:
    holdings = sq.Holdings("What is the flowering plant in the daisy family?")
    assert holdings.terms == ["flowering", "plant", "daisy", "family"]
    # "plants" holds "plant"; "Flowering" is case-folded; "daisy family" is written as a phrase.
    assert _count(holdings, "Flowering plants of the daisy family") == (4, 2)
    # All four words, none adjacent as in the question: no phrase.
    assert _count(holdings, "A family of plants; the daisy is flowering") == (4, 0)
    # Punctuation between the two words still makes them adjacent (FTS5 phrases agree).
    assert _count(holdings, "flowering-plants, daisy-family") == (4, 2)
    # A word that merely contains a term ("transplant") does not hold it.
    assert _count(holdings, "A transplant") == (0, 0)


def test_holdings_fold_diacritics_as_the_index_does() -> None:
    # FTS5 (remove_diacritics 2) matches "Dvorak" to "Dvořák"; stage 2 must agree,
    # or it would scale down the very passage stage 1 found.
    assert _count(sq.Holdings("Antonin Dvorak symphonies"), "Antonín Dvořák: symphonies") == (3, 2)
    assert _count(sq.Holdings("Antonín Dvořák"), "Antonin Dvorak") == (2, 1)


def test_rerank_score_scales_by_coverage_and_raises_per_phrase() -> None:
    assert sq.rerank_score(10.0, matched_terms=4, terms=4, matched_phrases=0) == 10.0
    assert sq.rerank_score(10.0, matched_terms=1, terms=4, matched_phrases=0) == 2.5
    assert sq.rerank_score(10.0, matched_terms=4, terms=4, matched_phrases=2) == pytest.approx(
        10.0 * (1 + 2 * sq.PHRASE_BONUS)
    )
    # A passage holding one frequent word many times no longer beats one holding all of them.
    assert sq.rerank_score(12.0, matched_terms=1, terms=4, matched_phrases=0) < sq.rerank_score(
        8.0, matched_terms=4, terms=4, matched_phrases=0
    )


def test_rerank_score_raises_an_articles_first_sentence_by_the_share_it_holds() -> None:
    plain = sq.rerank_score(10.0, matched_terms=4, terms=4, matched_phrases=0)
    assert sq.rerank_score(
        10.0, matched_terms=4, terms=4, matched_phrases=0, lead_terms=2
    ) == pytest.approx(plain * (1 + sq.LEAD_BONUS * 0.5))
    assert sq.rerank_score(10.0, matched_terms=0, terms=0, matched_phrases=0) == 10.0
    assert sq.rerank_score(
        10.0, matched_terms=4, terms=4, matched_phrases=0, named=True
    ) == pytest.approx(plain * (1 + sq.TITLE_BONUS))


def test_first_sentence_ends_at_a_full_stop_before_a_capital() -> None:
    text = "Platanus is a genus of trees (plane trees). They are tall. Another."
    assert text[: sq.first_sentence_end(text)] == "Platanus is a genus of trees (plane trees)."
    # "3.5" and "e.g. the" are not sentence ends; no end at all: the whole text.
    no_end = "Pi is about 3.14 e.g. the ratio"
    assert sq.first_sentence_end(no_end) == len(no_end)


def _candidates(*items: tuple[float, str]) -> list[sq.Candidate]:
    return [sq.Candidate(score, "", text) for score, text in items]


def test_rerank_order_keeps_first_stage_order_on_ties_and_for_one_term() -> None:
    same = _candidates((2.0, "daisy family plant"), (2.0, "daisy family plant"), (3.0, "daisy"))
    # "daisy family": the two passages holding both terms and the phrase win; equal
    # scores keep their first-stage order (each backend's own tie-break).
    assert [i for i, _ in sq.rerank_order("daisy family", same, 3)] == [0, 1, 2]
    # One term, no title named: the first-stage scores, ties in their order.
    ones = _candidates((3.0, "daisy"), (2.0, "daisy"), (2.0, "daisy"))
    assert sq.rerank_order("daisy", ones, 3) == [(0, 3.0), (1, 2.0), (2, 2.0)]
    assert sq.rerank_order("daisy", ones, 1) == [(0, 3.0)]


def test_title_roots_drop_the_qualifier_and_stop_words() -> None:
    assert sq.title_roots("Queen (band)") == {"queen"}
    assert sq.title_roots("Pride and Prejudice") == {"pride", "prejudice"}
    assert sq.title_roots("Mountains") == {"mountain"}
    assert sq.title_roots("The Who") == {"the", "who"}  # all stop words: all of them


def test_holdings_name_a_title_only_with_every_word_of_it() -> None:
    h = sq.Holdings("Who wrote Pride and Prejudice?")
    assert h.names("Pride and Prejudice") and h.names("Pride (novel)")
    assert not h.names("Pride and Prejudice (2005 film) sequel")
    assert not h.names("Prejudice and discrimination")
    assert not h.names("")
    assert sq.Holdings("What are mountains?").names("Mountain")
    assert sq.Holdings("Who were The Who?").names("The Who")


def test_rerank_order_raises_the_article_a_question_names() -> None:
    # "What is Science?": one term; the article titled with it wins over titles
    # that hold it with another word, one term or several.
    cands = [
        sq.Candidate(3.0, "Computer science", "Computer science is the study of computation."),
        sq.Candidate(2.9, "Political science", "Political science is the study of politics."),
        sq.Candidate(2.5, "Science", "Science is a systematic endeavor that builds knowledge."),
    ]
    order = sq.rerank_order("What is Science?", cands, 3)
    assert [i for i, _ in order] == [2, 0, 1]
    assert order[0][1] == pytest.approx(2.5 * (1 + sq.TITLE_BONUS))
    # Several terms: the same factor on top of the others.
    two = [
        sq.Candidate(4.0, "Jane Austen", "Jane Austen wrote novels of pride and prejudice."),
        sq.Candidate(3.0, "Pride and Prejudice", "Jane Austen wrote it in 1813."),
    ]
    assert [i for i, _ in sq.rerank_order("Who wrote Pride and Prejudice?", two, 2)] == [1, 0]


def test_rerank_order_prefers_the_article_whose_first_sentence_answers() -> None:
    # Same words, same first-stage score: the passage starting its article and
    # saying it in its first sentence wins; mid-article or later sentences do not count.
    text = "Platanus is a genus of flowering plants. It grows in towns."
    late = "It grows in towns. Platanus is a genus of flowering plants."
    cands = [
        sq.Candidate(5.0, "Plane", text, lead=False),
        sq.Candidate(5.0, "Plane", late, lead=True),
        sq.Candidate(5.0, "Plane", text, lead=True),
    ]
    order = sq.rerank_order("genus of flowering plants", cands, 3, keep_first=0)
    assert [i for i, _ in order] == [2, 0, 1]
    assert order[0][1] == pytest.approx(order[1][1] * (1 + sq.LEAD_BONUS))


def test_rerank_order_keeps_the_first_stages_best_half() -> None:
    # Stage 1's first two hold one term of two; the rest hold both and the phrase.
    cands = _candidates(
        (10.0, "daisy"), (9.0, "daisy"), *[(8.0 - i / 10, "daisy family") for i in range(6)]
    )
    free = sq.rerank_order("daisy family", cands, 4, keep_first=0)
    assert [i for i, _ in free] == [2, 3, 4, 5]
    kept = sq.rerank_order("daisy family", cands, 4)  # top_k // 2 = 2 kept
    assert sorted(i for i, _ in kept) == [0, 1, 2, 3]
    # All ordered by the new score: the kept ones last here.
    assert [i for i, _ in kept] == [2, 3, 0, 1]
    # Keeping all four places: the same four, still ordered by the new score.
    assert [i for i, _ in sq.rerank_order("daisy family", cands, 4, keep_first=4)] == [2, 3, 0, 1]
    assert [i for i, _ in sq.rerank_order("daisy family", cands, 4, keep_first=9)] == [2, 3, 0, 1]


def test_rerank_order_stops_early_with_the_same_answer() -> None:
    # 40 candidates with falling first-stage scores, some starting their article,
    # holding all terms or one.
    texts = ["daisy family" if i % 3 == 0 else "daisy" for i in range(40)]
    cands = [sq.Candidate(100.0 - i, "", t, lead=i % 4 == 0) for i, t in enumerate(texts)]
    holdings = sq.Holdings("daisy family")

    def score(c: sq.Candidate) -> float:
        held, phrases = _count(holdings, c.text)
        return sq.rerank_score(c.score, matched_terms=held, terms=2, matched_phrases=phrases,
                               lead_terms=held if c.lead else 0)  # fmt: skip

    for keep in (0, 2):
        for k in (1, 3, 8, 40):
            keep_k = min(keep, k)
            rest = sorted(((i, score(c)) for i, c in enumerate(cands) if i >= keep_k),
                          key=lambda item: -item[1])[: k - keep_k]  # fmt: skip
            want = sorted([(i, score(cands[i])) for i in range(keep_k)] + rest,
                          key=lambda item: (-item[1], item[0]))  # fmt: skip
            assert sq.rerank_order("daisy family", cands, k, keep_first=keep) == want


@pytest.mark.parametrize("question", ["daisy family", "daisy"])
def test_rerank_order_skips_only_what_cannot_win_with_named_titles(question: str) -> None:
    # Titles the question names (x TITLE_BONUS) and first passages late in the
    # first stage's order: skipping and stopping must not change the answer.
    titles = ["Daisy", "Family", "Daisy family", "Asteraceae", "Bellis"]
    texts = ["daisy family" if i % 3 == 0 else "daisy" for i in range(40)]
    cands = [
        sq.Candidate(100.0 - 2 * i, titles[i % 5], t, lead=i % 4 == 0) for i, t in enumerate(texts)
    ]
    holdings = sq.Holdings(question)
    for keep in (0, 2):
        for k in (1, 3, 8):
            scored = [(i, sq._stage2_score(holdings, c)) for i, c in enumerate(cands)]
            # The first ``keep`` stay, and so do named titles in the first k.
            # One place stays free for the best new score.
            stays = [i < min(keep, k) for i in range(len(cands))]
            room = k - min(keep, k) - 1
            for i in range(min(keep, k), k):
                if room > 0 and holdings.names(cands[i].title):
                    stays[i], room = True, room - 1
            kept = [item for item, s in zip(scored, stays, strict=True) if s]
            others = [item for item, s in zip(scored, stays, strict=True) if not s]
            rest = sorted(others, key=lambda item: -item[1])[: k - len(kept)]
            want = sorted(kept + rest, key=lambda item: (-item[1], item[0]))
            assert sq.rerank_order(question, cands, k, keep_first=keep) == want


def test_rerank_order_keeps_a_named_article_bm25f_put_in_the_top_k() -> None:
    # "Who were the founding members of Queen?": the band's passage, fifth for BM25F,
    # holds only "queen"; five queens' passages holding "members" or "founded" outscore
    # it in stage 2, but the question names its title, so it stays.
    band = sq.Candidate(8.0, "Queen (band)", "Queen are a British rock band formed in 1970.")
    royal = [
        sq.Candidate(10.0 - i / 10, f"Queen {i}", "A queen and member of a dynasty.")
        for i in range(4)
    ]
    founders = [
        sq.Candidate(7.0 - i / 10, f"Order {i}", "Founding members of an order of queens.")
        for i in range(6)
    ]
    cands = [*royal, band, *founders]
    q = "Who were the founding members of Queen?"
    assert 4 in [i for i, _ in sq.rerank_order(q, cands, 8)]
    # Named titles stay only from BM25F's own top_k: further down they compete.
    late = [*royal, *founders, band]
    assert 10 not in [i for i, _ in sq.rerank_order(q, late, 8)]
    # One place stays free: the best new score leads whatever top_k is asked for,
    # even when BM25F's first is a named title.
    first = [band._replace(score=10.5), *royal]
    assert sq.rerank_order(q, first, 1)[0] == sq.rerank_order(q, first, 5)[0]
    assert sq.rerank_order(q, first, 1)[0][0] == 1


def test_rerank_hits_reorders_cluster_hits_and_cuts_to_top_k() -> None:
    def hit(chunk: str, score: float, title: str, text: str) -> dict:
        source = {"chunk_id": chunk, "title": title, "text": text, "offset_start": 10}
        return {"_score": score, "_source": source}

    hits = [
        hit("a#0", 9.0, "Mountaineering", "Mountain mountain mountain climbing."),
        hit("b#0", 6.0, "Mount Kilimanjaro", "The highest mountain in Africa."),
    ]
    got = sq.rerank_hits("What is the highest mountain in Africa?", hits, 1)
    assert [h["_source"]["chunk_id"] for h in got] == ["b#0"]
    # 6 x (3/3 terms) x (1 + 0.5 for "highest mountain"; "mountain africa" is not adjacent as written)
    assert got[0]["_score"] == pytest.approx(6.0 * 1.5)


def test_served_index_version_names_this_codes_ranking_and_the_index_content() -> None:
    meta = {
        "index_version": "05ed445d555b-chunker-v1-bm25f-v3",
        "corpus_digest": "05ed445d555b" + "0" * 52,
        "chunker_version": "chunker-v1",
    }
    assert sq.served_index_version(meta) == f"05ed445d555b-chunker-v1-{sq.RANKING_VERSION}"
    assert sq.served_index_version(meta, dense=True).endswith(f"-{sq.DENSE_RANKING_VERSION}")
    # An index this code built is served under the version it was built with.
    built = sq.index_version_for(meta["corpus_digest"])
    assert sq.served_index_version({**meta, "index_version": built}) == built
    # Without its content's parts, the stored version (or nothing) is all there is.
    assert sq.served_index_version({"index_version": "custom"}) == "custom"
    assert sq.served_index_version({}) == ""


def test_dense_index_version_names_the_fused_ranking() -> None:
    version = sq.index_version_for("ABCDEF0123456789" * 4, dense=True)
    assert version == f"ABCDEF012345-{CHUNKER_VERSION}-{sq.RANKING_VERSION}+minilm-rrf"
    assert version != sq.index_version_for("ABCDEF0123456789" * 4)


def test_fuse_ranks_sums_reciprocal_ranks() -> None:
    # 2 is 2nd and 1st: 1/12 + 1/11 beats 1 (1st of one list only) and 3 (3rd, 2nd).
    fused = sq.fuse_ranks([[1, 2, 3], [2, 3, 4]], k=10)
    assert [item for item, _ in fused] == [2, 3, 1, 4]
    assert fused[0][1] == pytest.approx(1 / 12 + 1 / 11)


def test_fuse_ranks_keeps_the_first_seen_order_on_ties_and_handles_empty_lists() -> None:
    assert [item for item, _ in sq.fuse_ranks([[7, 8], [8, 7]], k=10)] == [7, 8]
    assert [item for item, _ in sq.fuse_ranks([[5, 6], []])] == [5, 6]
    assert sq.fuse_ranks([[], []]) == []
