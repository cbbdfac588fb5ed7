from __future__ import annotations

import pytest

from qfarm.common.retrieval.chunking import chunk_document, chunk_spans, split_sentences

SENTENCES = [
    "The Beatles were an English rock band formed in Liverpool in 1960.",
    "The band comprised John Lennon, Paul McCartney, George Harrison and Ringo Starr.",
    "They are regarded as the most influential band in popular music.",
    "Rooted in skiffle, beat and 1950s rock 'n' roll, their sound incorporated classical elements.",
    "They also explored styles ranging from folk and Indian music to psychedelia and hard rock.",
    "As pioneers in recording, songwriting and artistic presentation, they changed the industry.",
    "Led by primary songwriters Lennon and McCartney, the Beatles evolved from Lennon's group.",
    "Their first record was released in 1962 and reached number seventeen.",
    "Short one.",
    "By early 1964 they had become international stars and had led the British Invasion.",
]


def _doc(n_sentences: int) -> str:
    return " ".join(SENTENCES[i % len(SENTENCES)] for i in range(n_sentences))


def test_short_document_is_one_passage_covering_it() -> None:
    text = "  Liverpool is a city in England. It has a port.\n"
    (passage,) = chunk_document("Liverpool", "Liverpool", text)
    assert passage.text == "Liverpool is a city in England. It has a port."
    assert text[passage.offset_start : passage.offset_end] == passage.text
    assert passage.chunk_id == "Liverpool#0"
    assert passage.title == "Liverpool"


def test_passages_are_slices_of_the_source_within_the_limit() -> None:
    text = _doc(40)
    passages = chunk_document("b", "The Beatles", text, max_chars=300, overlap_chars=80)
    assert len(passages) > 5
    for n, p in enumerate(passages):
        assert text[p.offset_start : p.offset_end] == p.text
        assert len(p.text) <= 300
        assert p.chunk_id == f"b#{n}"
    # Every character of the document that is not whitespace lies in some passage.
    covered = set()
    for p in passages:
        covered.update(range(p.offset_start, p.offset_end))
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())


def test_passages_start_and_end_on_sentence_boundaries() -> None:
    text = _doc(30)
    starts = {s for s, _ in split_sentences(text)}
    ends = {e for _, e in split_sentences(text)}
    for p in chunk_document("b", "B", text, max_chars=400, overlap_chars=0):
        assert p.offset_start in starts
        assert p.offset_end in ends


def test_overlap_repeats_a_short_trailing_sentence_and_zero_overlap_does_not() -> None:
    text = _doc(30)
    with_overlap = chunk_spans(text, max_chars=400, overlap_chars=120)
    without = chunk_spans(text, max_chars=400, overlap_chars=0)
    assert any(b[0] < a[1] for a, b in zip(with_overlap, with_overlap[1:], strict=False))
    assert all(b[0] >= a[1] for a, b in zip(without, without[1:], strict=False))
    # The overlap is small: never more than overlap_chars of the previous passage.
    for a, b in zip(with_overlap, with_overlap[1:], strict=False):
        assert a[1] - b[0] <= 120
        assert b[0] > a[0]  # progress


def test_initials_and_abbreviations_do_not_end_sentences() -> None:
    text = "It was co-written by Arthur C. Clarke in 1968. Dr. Who visited St. Louis in the U.S. Then he left."
    sentences = [text[s:e] for s, e in split_sentences(text)]
    assert sentences[0] == "It was co-written by Arthur C. Clarke in 1968."
    assert sentences[1].startswith("Dr. Who visited St. Louis")


def test_sentence_longer_than_a_passage_is_cut_at_whitespace() -> None:
    words = " ".join(f"word{i}" for i in range(400))  # one sentence, ~3,000 chars
    passages = chunk_document("w", "W", words + ".", max_chars=200, overlap_chars=0)
    assert len(passages) > 10
    for p in passages:
        assert len(p.text) <= 200
        assert not p.text.startswith(" ") and not p.text.endswith(" ")
        assert p.text.split()[0].startswith("word")  # no word cut in half


def test_a_word_longer_than_a_passage_is_cut_hard() -> None:
    text = "x" * 450
    spans = chunk_spans(text, max_chars=200, overlap_chars=0)
    assert spans == [(0, 200), (200, 400), (400, 450)]


def test_empty_or_blank_text_has_no_passages() -> None:
    assert chunk_document("e", "E", "") == []
    assert chunk_document("e", "E", "   \n ") == []


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        chunk_spans("abc", max_chars=0)
    with pytest.raises(ValueError):
        chunk_spans("abc", overlap_chars=-1)


def test_chunking_is_deterministic() -> None:
    text = _doc(25)
    assert chunk_document("d", "D", text) == chunk_document("d", "D", text)
