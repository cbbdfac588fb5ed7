"""Corpus ingestion: stream a corpus file, chunk it, fill an index, switch atomically.

* Reading is streaming for JSONL (plain, gzip or bz2, detected by magic bytes),
  so memory stays bounded on a multi-gigabyte Wikipedia extract; whole-file
  JSON (an array, or the default corpus's title → summary mapping) is loaded
  at once.
* A bad document (no id, no text, broken JSON, bytes that are not UTF-8) is
  reported with ``file:line`` and skipped; the build goes on. More than
  ``max_errors`` bad documents abort the build before anything is switched.
  A file in UTF-16/32 or in a legacy 8-bit encoding throughout is refused at
  once with the command that converts it.
* Every index is versioned: ``index_version = corpus digest (sha256 of the
  file's bytes, 12 hex) + chunker version``. The embedded index is built in a
  temporary file renamed over the old one; a cluster index is built as
  ``<alias>-<version>`` and the alias moved in one ``_aliases`` call when it is
  complete. Readers therefore see the old index or the new one, never half.
"""

from __future__ import annotations

import bz2
import codecs
import contextlib
import gzip
import hashlib
import json
import os
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from common.chunking import Passage, chunk_document
from common.corpus import CorpusIssue, Document, documents_from_json, parse_jsonl_line, sniff_format
from common.errors import InputError, RetrievalError
from common.search_query import MAPPING_VERSION, index_body, index_version_for, versioned_index_name
from common.settings import Settings
from common.versions import CHUNKER_VERSION
from worker.retrieval.cluster import ClusterRetriever
from worker.retrieval.default_corpus import DEFAULT_CORPUS_LABEL, default_corpus_path
from worker.retrieval.embedded import EmbeddedIndexWriter, read_meta

try:  # POSIX: serialize concurrent builds of one index file (several workers starting)
    import fcntl
except ImportError:  # pragma: no cover - Windows builds without the lock
    fcntl = None  # type: ignore[assignment]

MAX_ISSUES_KEPT = 100
# This many undecodable lines before the first good one: the file is not UTF-8 at all.
_NOT_UTF8_AFTER = 5
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


# --------------------------------------------------------------------------- the corpus file


@dataclass
class CorpusSource:
    """A corpus file and how it is named in index metadata (``default`` or its path)."""

    label: str
    path: Path
    _digest: str | None = field(default=None, repr=False)

    @classmethod
    def resolve(cls, spec: str | Path | None) -> CorpusSource:
        if spec is None or str(spec) == DEFAULT_CORPUS_LABEL:
            return cls(DEFAULT_CORPUS_LABEL, default_corpus_path())
        path = Path(spec).expanduser()
        if not path.is_file():
            raise InputError(
                f"--corpus {spec}: no such file; pass a JSONL file (or .gz) or `default`"
            )
        return cls(str(path), path)

    def digest(self) -> str:
        """sha256 of the file's bytes (as stored: a .gz and its content differ)."""
        if self._digest is None:
            h = hashlib.sha256()
            with self.path.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
            self._digest = h.hexdigest()
        return self._digest

    @property
    def index_version(self) -> str:
        return index_version_for(self.digest())


def _not_utf8(where: str, raw: bytes, exc: UnicodeDecodeError) -> str:
    return (
        f"{where}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
        "re-encode the file as UTF-8, e.g. `iconv -f cp1252 -t utf-8 IN > OUT`"
    )


class CorpusReader:
    """Yields ``Document`` or ``CorpusIssue`` per record; ``position``/``total`` drive progress."""

    def __init__(self, source: CorpusSource):
        self.source = source
        self.name = str(source.path)
        self.total = source.path.stat().st_size
        self.unit = "B"
        self.position = 0

    def __iter__(self) -> Iterator[Document | CorpusIssue]:
        with self.source.path.open("rb") as raw:
            magic = raw.read(3)
            raw.seek(0)
            stream: IO[bytes] = raw
            if magic[:2] == b"\x1f\x8b":
                stream = gzip.GzipFile(fileobj=raw)  # type: ignore[assignment]
            elif magic == b"BZh":
                stream = bz2.BZ2File(raw)  # type: ignore[assignment]
            try:
                yield from self._records(stream, raw)
            except (OSError, EOFError, zlib.error) as exc:
                raise InputError(
                    f"{self.name}: cannot decompress ({exc}); is the file complete?"
                ) from exc

    def _records(self, stream: IO[bytes], raw: IO[bytes]) -> Iterator[Document | CorpusIssue]:
        head: list[bytes] = []  # lines read before the format is known
        undecodable = 0
        decoded_any = False
        for lineno, line in enumerate(stream, start=1):
            self.position = raw.tell()
            where = f"{self.name}:{lineno}"
            if lineno == 1:
                line = self._strip_bom(line)
            if not decoded_any:
                head.append(line)
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                undecodable += 1
                if not decoded_any and undecodable >= _NOT_UTF8_AFTER:
                    raise InputError(
                        f"{self.name}: not UTF-8 (the first {undecodable} lines are not); "
                        "re-encode it, e.g. `iconv -f cp1252 -t utf-8 IN > OUT`"
                    ) from exc
                yield CorpusIssue(where, _not_utf8(where, line, exc))
                continue
            if not decoded_any:
                if not text.strip():
                    continue
                decoded_any = True
                if sniff_format(text) == "json":
                    yield from self._whole_json(b"".join(head) + stream.read())
                    return
            try:
                document = parse_jsonl_line(text, where=where)
            except InputError as exc:
                yield CorpusIssue(where, str(exc))
            else:
                if document is not None:
                    yield document

    def _strip_bom(self, line: bytes) -> bytes:
        for bom, name in _WIDE_BOMS:
            if line.startswith(bom):
                raise InputError(
                    f"{self.name}: encoded as {name}; qfarm reads UTF-8: "
                    f"`iconv -f {name} -t UTF-8 IN > OUT`"
                )
        if b"\x00" in line:
            raise InputError(
                f"{self.name}:1: contains NUL bytes (UTF-16 without a byte-order mark?); "
                "re-encode it as UTF-8, e.g. `iconv -f UTF-16LE -t UTF-8 IN > OUT`"
            )
        return line.removeprefix(codecs.BOM_UTF8)

    def _whole_json(self, data: bytes) -> Iterator[Document | CorpusIssue]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1)
            where = f"{self.name}:{line}"
            raise InputError(
                f"{where}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at column {column + 1}); "
                "re-encode the file as UTF-8, e.g. `iconv -f cp1252 -t utf-8 IN > OUT`"
            ) from exc
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"{self.name}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg}); expected JSONL "
                "(one object per line) or one JSON array/object"
            ) from exc
        del text, data
        self.total = len(parsed) if isinstance(parsed, list | dict) else 1
        self.unit = "doc"
        self.position = 0
        for item in documents_from_json(parsed, source=self.name):
            self.position += 1
            yield item


# --------------------------------------------------------------------------- reports and progress


@dataclass
class IngestReport:
    """What one ``qfarm index`` did."""

    backend: str
    target: str  # index file or concrete index name
    index_version: str
    corpus: str
    corpus_digest: str
    alias: str | None = None
    built: bool = True  # False: the index was already up to date
    documents: int = 0
    passages: int = 0
    error_count: int = 0
    issues: list[CorpusIssue] = field(default_factory=list)  # the first MAX_ISSUES_KEPT
    elapsed_s: float = 0.0
    replaced: list[str] = field(default_factory=list)  # indices the alias left
    pruned: list[str] = field(default_factory=list)

    @property
    def passages_per_s(self) -> float:
        return self.passages / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def add_issue(self, issue: CorpusIssue, max_errors: int | None) -> None:
        self.error_count += 1
        if len(self.issues) < MAX_ISSUES_KEPT:
            self.issues.append(issue)
        if max_errors is not None and self.error_count > max_errors:
            raise InputError(
                f"{self.corpus}: more than {max_errors} bad documents (first: {self.issues[0]}); "
                "nothing was switched; fix the corpus or raise --max-errors"
            )


class _Progress:
    """A tqdm bar over the reader's bytes (or documents for whole-file JSON)."""

    def __init__(self, reader: CorpusReader, enabled: bool, desc: str):
        self.reader = reader
        self.bar: Any = None
        if enabled:
            from tqdm import tqdm  # noqa: PLC0415

            self.bar = tqdm(
                total=reader.total, unit=reader.unit, unit_scale=True, desc=desc, dynamic_ncols=True
            )
        self._unit = reader.unit

    def update(self, report: IngestReport) -> None:
        if self.bar is None:
            return
        if self.reader.unit != self._unit:
            self._unit = self.reader.unit
            self.bar.unit = self._unit
            self.bar.unit_scale = False
            self.bar.reset(total=self.reader.total)
        delta = self.reader.position - self.bar.n
        if delta > 0:
            self.bar.update(delta)
            self.bar.set_postfix_str(
                f"docs={report.documents} passages={report.passages} errors={report.error_count}",
                refresh=False,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _chunked(
    reader: CorpusReader, report: IngestReport, progress: _Progress, max_errors: int | None
) -> Iterator[tuple[Document, list[Passage]]]:
    for item in reader:
        progress.update(report)
        if isinstance(item, CorpusIssue):
            report.add_issue(item, max_errors)
            continue
        yield item, chunk_document(item.doc_id, item.title, item.text)
    progress.update(report)


def _meta(source: CorpusSource) -> dict[str, Any]:
    return {
        "index_version": source.index_version,
        "corpus": source.label,
        "corpus_digest": source.digest(),
        "chunker_version": CHUNKER_VERSION,
        "mapping_version": MAPPING_VERSION,
    }


# --------------------------------------------------------------------------- embedded


@contextlib.contextmanager
def _build_lock(dest: Path) -> Iterator[None]:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with (dest.parent / f".{dest.name}.lock").open("a") as fh:
        if fcntl is not None:
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(fh, fcntl.LOCK_UN)


def build_embedded_index(
    source: CorpusSource,
    dest: Path,
    *,
    progress: bool = True,
    max_errors: int | None = None,
    force: bool = False,
) -> IngestReport:
    """Build the SQLite index of ``source`` at ``dest`` (temp file, then an atomic rename)."""
    with _build_lock(dest):
        return _build_embedded_locked(
            source, dest, progress=progress, max_errors=max_errors, force=force
        )


def _build_embedded_locked(
    source: CorpusSource, dest: Path, *, progress: bool, max_errors: int | None, force: bool
) -> IngestReport:
    t0 = time.perf_counter()
    report = IngestReport(
        "embedded", str(dest), source.index_version, source.label, source.digest()
    )
    current = read_meta(dest)
    if not force and current and current.get("index_version") == source.index_version:
        report.built = False
        report.documents = int(current.get("documents", 0))
        report.passages = int(current.get("passages", 0))
        return report
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    writer = EmbeddedIndexWriter(tmp)
    reader = CorpusReader(source)
    bar = _Progress(reader, progress, "indexing (embedded)")
    try:
        for document, passages in _chunked(reader, report, bar, max_errors):
            if writer.add(document, passages):
                report.documents, report.passages = writer.documents, writer.passages
            else:
                where = document.where or document.doc_id
                report.add_issue(
                    CorpusIssue(
                        where, f"{where}: duplicate document id {document.doc_id!r}; kept the first"
                    ),
                    max_errors,
                )
        if writer.documents == 0:
            raise InputError(f"{source.path}: no documents could be read; nothing was indexed")
        writer.finish(_meta(source))
        os.replace(tmp, dest)
    except BaseException:
        writer.abort()
        raise
    finally:
        bar.close()
    report.elapsed_s = time.perf_counter() - t0
    return report


def ensure_default_index(settings: Settings, *, progress: bool = True) -> Path:
    """The embedded default-corpus index at ``settings.embedded_index_path()``, built if missing or stale.

    An index there built from another corpus (``qfarm index --corpus …``) is the
    user's choice and is left alone.
    """
    dest = settings.embedded_index_path()
    source = CorpusSource.resolve(DEFAULT_CORPUS_LABEL)
    with _build_lock(dest):
        meta = read_meta(dest)
        if meta is not None and (
            meta.get("corpus") != DEFAULT_CORPUS_LABEL
            or meta.get("index_version") == source.index_version
        ):
            return dest
        _build_embedded_locked(source, dest, progress=progress, max_errors=None, force=True)
    return dest


# --------------------------------------------------------------------------- clusters


def _actions(
    index: str, chunked: Iterator[tuple[Document, list[Passage]]], report: IngestReport
) -> Iterator[dict[str, Any]]:
    for _document, passages in chunked:
        report.documents += 1
        for p in passages:
            yield {
                "_op_type": "create",  # a repeated id fails (409) instead of overwriting
                "_index": index,
                "_id": p.chunk_id,
                "_source": {
                    "doc_id": p.doc_id,
                    "chunk_id": p.chunk_id,
                    "title": p.title,
                    "text": p.text,
                    "offset_start": p.offset_start,
                    "offset_end": p.offset_end,
                },
            }


def _bulk_issue(item: dict[str, Any]) -> CorpusIssue:
    ((_op, info),) = item.items()
    chunk_id = str(info.get("_id"))
    error = info.get("error") or {}
    reason = error.get("reason") if isinstance(error, dict) else str(error)
    if info.get("status") == 409:
        reason = "duplicate document id (its passage exists already); kept the first"
    return CorpusIssue(chunk_id, f"passage {chunk_id}: rejected by the cluster ({reason})")


def build_cluster_index(
    retriever: ClusterRetriever,
    source: CorpusSource,
    *,
    progress: bool = True,
    max_errors: int | None = None,
    force: bool = False,
    shards: int = 1,
    replicas: int = 0,
    prune: bool = False,
) -> IngestReport:
    """Fill ``<alias>-<version>`` from ``source`` and move the alias to it atomically."""
    t0 = time.perf_counter()
    name = versioned_index_name(retriever.alias, source.index_version)
    report = IngestReport(
        retriever.backend,
        name,
        source.index_version,
        source.label,
        source.digest(),
        alias=retriever.alias,
    )
    existing = retriever.versioned_indices()
    if not force and name in existing and retriever.index_meta(name).get("complete"):
        # Built before (maybe a rollback): no rebuild; just make sure the alias serves it.
        meta = retriever.index_meta(name)
        report.built = False
        report.documents, report.passages = (
            int(meta.get("documents", 0)),
            int(meta.get("passages", 0)),
        )
        if name not in retriever.alias_targets():
            report.replaced = retriever.switch_alias(name)
        return _after_switch(retriever, report, prune=prune, t0=t0)
    retriever.create_index(
        name,
        index_body(shards=shards, replicas=replicas, meta={**_meta(source), "complete": False}),
    )
    reader = CorpusReader(source)
    bar = _Progress(reader, progress, f"indexing ({retriever.backend})")
    try:
        chunked = _chunked(reader, report, bar, max_errors)
        for ok, item in retriever.bulk_index(name, _actions(name, chunked, report)):
            if ok:
                report.passages += 1
            else:
                report.add_issue(_bulk_issue(item), max_errors)
    except BaseException:
        with contextlib.suppress(RetrievalError):
            retriever.delete_index(name)  # never leave a half-built version behind
        raise
    finally:
        bar.close()
    if report.passages == 0:
        retriever.delete_index(name)
        raise InputError(
            f"{source.path}: no documents could be indexed; the alias was not switched"
        )
    meta = {
        **_meta(source),
        "complete": True,
        "documents": report.documents,
        "passages": report.passages,
        "errors": report.error_count,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    retriever.finish_index(name, meta, replicas=replicas)
    report.replaced = retriever.switch_alias(name)
    return _after_switch(retriever, report, prune=prune, t0=t0)


def _after_switch(
    retriever: ClusterRetriever, report: IngestReport, *, prune: bool, t0: float
) -> IngestReport:
    if prune:
        for old in retriever.versioned_indices():
            if old != report.target:
                retriever.delete_index(old)
                report.pruned.append(old)
    report.elapsed_s = time.perf_counter() - t0
    return report
