"""The passages index's mapping, as the cluster backends check it."""

from __future__ import annotations


def test_mapping_problems_name_what_keeps_an_index_from_being_the_farms() -> None:
    from qfarm.common.retrieval.index import index_body, mapping_problems

    built = index_body(meta={"index_version": "v", "corpus_digest": "d" * 64, "chunker_version": "c"})
    assert mapping_problems(built["mappings"]) == []
    by_hand = {"properties": {"title": {"type": "text"}, "text": {"type": "keyword"}}}
    assert mapping_problems(by_hand) == [
        "no field 'doc_id'", "no field 'chunk_id'",
        "field 'title' is analyzed by 'standard', not 'english'",
        "field 'text' is 'keyword', not 'text'",
        "no field 'offset_start'", "no field 'offset_end'",
        "no _meta with the index version",
    ]  # fmt: skip
