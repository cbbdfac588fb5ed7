"""Gold answers for the row page, read back from a run's question file.

A row records whether its answer matched a gold answer (``gold_in_claims``) and where
one stood in the evidence, not the gold answers themselves: those live in the question
file the manifest names. The file is read once per run (and again when it changes),
and only when its digest is still the manifest's: a file edited since the run would
show answers the run was not graded against.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from qfarm.common.errors import InputError
from qfarm.common.models import Manifest
from qfarm.common.questions import digest_content, parse_questions

# The longest question any file may hold here: the file was checked when the run began.
MAX_CHARS = 1_000_000


@dataclass(frozen=True)
class GoldFile:
    """A run's gold answers by question id, or None with a note saying why there are none."""

    answers: dict[str, tuple[str, ...]] | None
    note: str = ""


class GoldFiles:
    """Question files read for their gold answers, cached by path, size and mtime."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], tuple[tuple[int, int], GoldFile]] = {}
        self._lock = threading.Lock()

    def for_run(self, manifest: Manifest) -> GoldFile:
        path = Path(manifest.question_file)
        try:
            st = path.stat()
        except (OSError, ValueError):  # "<command line>", a file moved or on another host
            return GoldFile(None, f"the question file {manifest.question_file} is not on this "
                                  "host, so its gold answers cannot be shown")
        key, stamp = (str(path), manifest.question_file_digest), (st.st_mtime_ns, st.st_size)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] == stamp:
                return hit[1]
        found = self._read(path, manifest.question_file_digest)
        with self._lock:
            self._cache[key] = (stamp, found)
        return found

    @staticmethod
    def _read(path: Path, digest: str) -> GoldFile:
        try:
            data = path.read_bytes()
            if digest_content(data) != digest:
                return GoldFile(None, f"{path} has changed since the run, so its gold answers "
                                      "are not shown (the row's match flags stand)")
            questions = parse_questions(str(path), data.decode("utf-8"), max_chars=MAX_CHARS)
        except (OSError, UnicodeDecodeError, InputError) as exc:
            return GoldFile(None, f"{path} could not be read again: {exc}")
        return GoldFile({q.id: q.answers for q in questions if q.answers})
