"""Reading corpus files: which file, its digest, and a stream of documents.

JSONL is streamed line by line (plain, gzip or bz2, detected by magic bytes),
so memory stays bounded on a multi-gigabyte Wikipedia extract; whole-file JSON
(an array, or the default corpus's title → summary mapping) is loaded at once.
A bad record becomes a ``CorpusIssue`` with ``file:line`` and reading goes on;
a file that is not UTF-8 at all (UTF-16/32, or a legacy 8-bit encoding
throughout) is refused at once with the command that converts it.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import hashlib
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from qfarm.common.errors import InputError
from qfarm.common.retrieval.corpus import (
    CorpusIssue,
    Document,
    documents_from_json,
    parse_jsonl_line,
    sniff_format,
)
from qfarm.common.retrieval.ranking import index_version_for
from qfarm.worker.retrieval.default_corpus import DEFAULT_CORPUS_LABEL, default_corpus_path

# This many undecodable lines before the first good one: the file is not UTF-8 at all.
_NOT_UTF8_AFTER = 5
_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


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

    def index_version_with(self, *, dense: bool) -> str:
        """The version of this corpus's index with (or without) the dense stage's vectors."""
        return index_version_for(self.digest(), dense=dense)


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
