from __future__ import annotations

import json

import pytest

from qfarm.common.errors import InputError
from qfarm.common.retrieval.corpus import (
    CorpusIssue,
    Document,
    document_from_record,
    documents_from_json,
    parse_jsonl_line,
    sniff_format,
)


def test_jsonl_record_becomes_a_document() -> None:
    doc = parse_jsonl_line(
        '{"id": "b1", "title": "The Beatles", "text": "A band."}', where="c.jsonl:1"
    )
    assert doc == Document("b1", "The Beatles", "A band.")
    assert doc is not None and doc.where == "c.jsonl:1"


def test_blank_line_is_skipped() -> None:
    assert parse_jsonl_line("   \n", where="c.jsonl:2") is None


@pytest.mark.parametrize(
    "record, expected_id, expected_title",
    [
        # WikiExtractor --json
        (
            {
                "id": "12",
                "revid": "9",
                "url": "https://en.wikipedia.org/wiki?curid=12",
                "title": "Anarchism",
                "text": "T",
            },
            "12",
            "Anarchism",
        ),
        # numeric ids (Hugging Face wikipedia dumps, pageids)
        ({"pageid": 307, "title": "Abraham Lincoln", "text": "T"}, "307", "Abraham Lincoln"),
        # Pyserini: no title, text under "contents"
        ({"id": "doc3", "contents": "T"}, "doc3", ""),
    ],
)
def test_wikipedia_extractor_shapes(record: dict, expected_id: str, expected_title: str) -> None:
    doc = document_from_record(record, where="w.jsonl:1")
    assert (doc.doc_id, doc.title, doc.text) == (expected_id, expected_title, "T")


@pytest.mark.parametrize(
    "line, fragment",
    [
        ('{"title": "No id", "text": "x"}', 'no "id"'),
        ('{"id": "a", "title": "No text"}', 'no "text"'),
        ('{"id": "a", "text": "   "}', 'empty "text"'),
        ('{"id": "a", "text": 42}', "must be a string"),
        ('{"id": "", "text": "x"}', '"id" is empty'),
        ('{"id": true, "text": "x"}', 'no "id"'),
        ('["a", "b"]', "expected a JSON object"),
        ('{"id": "a", "text": "x"', "not valid JSON"),
    ],
)
def test_bad_lines_name_file_line_and_fix(line: str, fragment: str) -> None:
    with pytest.raises(InputError) as info:
        parse_jsonl_line(line, where="corpus.jsonl:7")
    message = str(info.value)
    assert message.startswith("corpus.jsonl:7: ")
    assert fragment in message


def test_mapping_of_summaries_uses_key_for_missing_id() -> None:
    data = {
        "The Beatles": {
            "title": "The Beatles",
            "extract": "An English rock band.",
            "topic": "Arts",
        },
        "Broken": {"title": "Broken"},
        "Liverpool": {"extract": "A city."},
    }
    items = list(documents_from_json(data, source="summaries.json"))
    docs = [i for i in items if isinstance(i, Document)]
    issues = [i for i in items if isinstance(i, CorpusIssue)]
    assert [(d.doc_id, d.title, d.text) for d in docs] == [
        ("The Beatles", "The Beatles", "An English rock band."),
        ("Liverpool", "Liverpool", "A city."),
    ]
    assert len(issues) == 1
    assert issues[0].where == "summaries.json: 'Broken'"
    assert 'no "text"' in str(issues[0])


def test_array_keeps_going_after_a_bad_item() -> None:
    data = [{"id": 1, "text": "a"}, {"text": "no id"}, {"id": 3, "text": "c"}]
    items = list(documents_from_json(data, source="a.json"))
    assert [type(i).__name__ for i in items] == ["Document", "CorpusIssue", "Document"]
    assert str(items[1]).startswith("a.json: item 1: ")


def test_single_document_object_and_scalar() -> None:
    (doc,) = documents_from_json({"id": "x", "text": "t"}, source="one.json")
    assert isinstance(doc, Document) and doc.doc_id == "x"
    with pytest.raises(InputError, match="one.json: expected JSONL"):
        list(documents_from_json(42, source="one.json"))


@pytest.mark.parametrize(
    "first_line, expected",
    [
        ('{"id": "a", "text": "b"}', "jsonl"),
        ('{"id": "a", "text": ', "jsonl"),  # a broken JSONL line is reported, not fatal
        ("{", "json"),  # pretty-printed object
        ('[{"id": "a", "text": "b"}]', "json"),
        (json.dumps({"The Beatles": {"title": "The Beatles", "extract": "x"}}), "json"),
    ],
)
def test_sniff_format(first_line: str, expected: str) -> None:
    assert sniff_format(first_line) == expected
