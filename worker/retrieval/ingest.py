"""Corpus ingestion: read a corpus file, chunk it, fill an index, switch atomically.

* Reading (``corpus_file``) streams JSONL with bounded memory; a bad document
  (no id, no text, broken JSON, bytes that are not UTF-8, a duplicate id) is
  reported with ``file:line`` and skipped, and the build goes on. More than
  ``max_errors`` bad documents abort the build before anything is switched.
* Every index is versioned: ``index_version = corpus digest (sha256 of the
  file's bytes, 12 hex) + chunker version + ranking version`` (the ranking
  names the dense stage when the index holds vectors). The embedded index is built in a
  temporary file renamed over the old one; a cluster index is built as
  ``<alias>-<version>`` and the alias moved in one ``_aliases`` call when it is
  complete. Readers therefore see the old index or the new one, never half.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qfarm.common.errors import InputError, RetrievalError
from qfarm.common.retrieval.chunking import Passage, chunk_document
from qfarm.common.retrieval.corpus import CorpusIssue, Document
from qfarm.common.retrieval.index import MAPPING_VERSION, index_body, versioned_index_name
from qfarm.common.settings import Settings
from qfarm.common.versions import CHUNKER_VERSION
from qfarm.common.vocab import Backend
from qfarm.worker.retrieval.cluster import ClusterRetriever
from qfarm.worker.retrieval.corpus_file import CorpusReader, CorpusSource
from qfarm.worker.retrieval.default_corpus import DEFAULT_CORPUS_LABEL
from qfarm.worker.retrieval.embedded import EmbeddedIndexWriter, read_meta
from qfarm.worker.retrieval.postings import index_has_postings

try:  # POSIX: serialize concurrent builds of one index file (several workers starting)
    import fcntl
except ImportError:  # pragma: no cover - Windows builds without the lock
    fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from qfarm.worker.retrieval.dense import DenseEncoder

MAX_ISSUES_KEPT = 100


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
    vectors_reused: int = 0  # --dense: passage vectors copied from the index replaced
    # Embedded builds: seconds per stage ("documents": read, chunked and stored; then the
    # writer's "full-text", "postings" and, with --dense, "vectors"), where a build's time went.
    stages_s: dict[str, float] = field(default_factory=dict)

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
            from tqdm import tqdm

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


def _meta(source: CorpusSource, index_version: str | None = None) -> dict[str, Any]:
    return {
        "index_version": index_version or source.index_version,
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
    encoder: DenseEncoder | None = None,
) -> IngestReport:
    """Build the SQLite index of ``source`` at ``dest`` (temp file, then an atomic rename).

    With ``encoder`` the index also holds every passage's vector (``--dense``).
    """
    with _build_lock(dest):
        return _build_embedded_locked(
            source, dest, progress=progress, max_errors=max_errors, force=force, encoder=encoder
        )


def _build_embedded_locked(
    source: CorpusSource,
    dest: Path,
    *,
    progress: bool,
    max_errors: int | None,
    force: bool,
    encoder: DenseEncoder | None = None,
) -> IngestReport:
    t0 = time.perf_counter()
    version = source.index_version_with(dense=encoder is not None)
    report = IngestReport(Backend.EMBEDDED, str(dest), version, source.label, source.digest())
    current = read_meta(dest)
    # An index from before the postings (worker/retrieval/postings.py) is rebuilt to gain them.
    if (not force and current and index_has_postings(dest)
            and current.get("index_version") in _up_to_date(source, encoder is not None)):
        report.index_version = str(current["index_version"])
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
        report.stages_s["documents"] = round(time.perf_counter() - t0, 3)
        # Vectors of unchanged passages come from the index being replaced (not with --force).
        reuse = dest if encoder is not None and not force and dest.exists() else None
        report.vectors_reused = writer.finish(
            _meta(source, version), encoder=encoder, progress=progress, reuse=reuse
        )
        report.stages_s.update(writer.stages_s)
        os.replace(tmp, dest)
    except BaseException:
        writer.abort()
        raise
    finally:
        bar.close()
    report.elapsed_s = time.perf_counter() - t0
    return report


def _up_to_date(source: CorpusSource, dense: bool) -> set[str]:
    """Index versions of ``source`` that need no build: with vectors when ``dense`` is
    asked; else either, since `qfarm index --dense` took minutes of encoding that a plain
    `qfarm index` (make run's first step) or a sweep must not throw away (--force does)."""
    return {source.index_version_with(dense=True)} | (
        set() if dense else {source.index_version_with(dense=False)}
    )


def ensure_default_index(settings: Settings, *, progress: bool = True) -> Path:
    """The embedded default-corpus index at ``settings.embedded_index_path()``, built if missing or stale.

    An index there built from another corpus (``qfarm index --corpus …``) is the
    user's choice and is left alone.
    """
    dest = settings.embedded_index_path()
    source = CorpusSource.resolve(DEFAULT_CORPUS_LABEL)
    current = _up_to_date(source, settings.dense)
    with _build_lock(dest):
        meta = read_meta(dest)
        if meta is not None and (
            meta.get("corpus") != DEFAULT_CORPUS_LABEL
            or (meta.get("index_version") in current and index_has_postings(dest))
        ):
            return dest
        encoder = None
        if settings.dense:  # QFARM_DENSE=1: the default index with vectors (minutes to encode)
            from qfarm.worker.retrieval.dense import open_encoder

            encoder = open_encoder(settings.dense_model)
        # Not force: that would also re-encode every passage a stale dense index already
        # has a vector for (the up-to-date check it skips answers as the one above did).
        _build_embedded_locked(
            source, dest, progress=progress, max_errors=None, force=False, encoder=encoder
        )
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
    """Fill ``<alias>-<version>`` from ``source`` and move the alias to it atomically.

    A version that is already complete is not rebuilt (without ``force``): the
    alias is moved to it if needed, which makes re-indexing an older corpus a
    rollback. A forced rebuild of the version being served is built beside it
    (``<name>-<unix time>``) so the alias never points at a half-built index.
    """
    t0 = time.perf_counter()
    name = versioned_index_name(retriever.alias, source.index_version)
    served = retriever.alias_targets()
    if force and name in served:
        name = f"{name}-{int(time.time())}"
    report = IngestReport(
        retriever.backend,
        name,
        source.index_version,
        source.label,
        source.digest(),
        alias=retriever.alias,
    )
    if not force and name in retriever.versioned_indices():
        meta = retriever.index_meta(name)
        if meta.get("complete"):
            report.built = False
            report.documents = int(meta.get("documents", 0))
            report.passages = int(meta.get("passages", 0))
            if name not in served:
                report.replaced = retriever.switch_alias(name)
            return _after_switch(retriever, report, prune=prune, t0=t0)
    body = index_body(shards=shards, replicas=replicas, meta={**_meta(source), "complete": False})
    retriever.create_index(name, body)
    try:
        _fill(retriever, source, report, progress=progress, max_errors=max_errors)
    except BaseException:
        with contextlib.suppress(RetrievalError):
            retriever.delete_index(name)  # never leave a half-built version behind
        raise
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


def _fill(
    retriever: ClusterRetriever,
    source: CorpusSource,
    report: IngestReport,
    *,
    progress: bool,
    max_errors: int | None,
) -> None:
    reader = CorpusReader(source)
    bar = _Progress(reader, progress, f"indexing ({retriever.backend})")
    try:
        chunked = _chunked(reader, report, bar, max_errors)
        for ok, item in retriever.bulk_index(
            report.target, _actions(report.target, chunked, report)
        ):
            if ok:
                report.passages += 1
            else:
                report.add_issue(_bulk_issue(item), max_errors)
    finally:
        bar.close()
    if report.passages == 0:
        raise InputError(
            f"{source.path}: no documents could be indexed; the alias was not switched"
        )


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


__all__ = [
    "CorpusReader",
    "CorpusSource",
    "IngestReport",
    "build_cluster_index",
    "build_embedded_index",
    "ensure_default_index",
]
