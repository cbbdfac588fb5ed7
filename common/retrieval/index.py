"""The indexes behind the retrieval backends: versions, names, aliases and mappings.

Pure: builds strings and dicts; ``qfarm.worker.retrieval`` creates and switches the indexes.
An index version names the corpus, the chunker and the ranking (``RANKING_VERSION``),
so a row says which content and which ranking served it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from qfarm.common.retrieval.ranking import DENSE_RANKING_VERSION, RANKING_VERSION
from qfarm.common.versions import CHUNKER_VERSION

# The mapping's analyzer: Lucene's English analyzer (possessive stemmer,
# lowercase, stop words, Porter stemmer), the nearest match to FTS5's
# ``porter unicode61`` tokenizer.
ANALYZER = "english"
MAPPING_VERSION = "mapping-v1"


def index_version_for(corpus_digest: str, *, dense: bool = False) -> str:
    """Index version = corpus digest (12 hex) + chunker version + ranking version."""
    ranking = DENSE_RANKING_VERSION if dense else RANKING_VERSION
    return f"{corpus_digest[:12]}-{CHUNKER_VERSION}-{ranking}"



def served_index_version(meta: Mapping[str, Any], *, dense: bool = False) -> str:
    """The index version a search of an index with ``meta`` records: its content and this ranking.

    The ranking runs at query time (the first stage's query and stage 2), so an
    index built when ``RANKING_VERSION`` was older is searched with today's
    ranking, and a row must name that one, not the build's. The content part
    (corpus digest, chunker) comes from the index. The stored version when
    ``meta`` lacks those parts ("" when it has none).
    """
    digest, chunker = meta.get("corpus_digest"), meta.get("chunker_version")
    if not digest or not chunker:
        return str(meta.get("index_version") or "")
    ranking = DENSE_RANKING_VERSION if dense else RANKING_VERSION
    return f"{str(digest)[:12]}-{chunker}-{ranking}"


def versioned_index_name(alias: str, index_version: str) -> str:
    """Concrete index behind ``alias`` for one version (lowercase, as clusters require)."""
    return f"{alias}-{index_version}".lower()


def is_versioned_index_of(alias: str, name: str) -> bool:
    return name.startswith(f"{alias.lower()}-") and name != alias.lower()


def alias_switch_actions(alias: str, new_index: str, old_indices: Iterable[str]) -> dict[str, Any]:
    """One ``_aliases`` request moving ``alias`` to ``new_index``: applied atomically."""
    actions: list[dict[str, Any]] = [
        {"remove": {"index": old, "alias": alias}}
        for old in sorted(set(old_indices))
        if old != new_index
    ]
    actions.append({"add": {"index": new_index, "alias": alias}})
    return {"actions": actions}



def index_body(
    *,
    shards: int = 1,
    replicas: int = 0,
    meta: Mapping[str, Any] | None = None,
    bulk_loading: bool = True,
) -> dict[str, Any]:
    """Settings and mappings of a passages index.

    ``bulk_loading`` turns refresh off while the index is filled (restored by
    ``serving_settings``). One shard by default: BM25 statistics are per shard,
    and a single shard keeps scores identical to a single-node build; raise it
    for corpora of tens of millions of passages.
    """
    return {
        "settings": {
            "index": {
                "number_of_shards": shards,
                "number_of_replicas": 0 if bulk_loading else replicas,
                "refresh_interval": "-1" if bulk_loading else "1s",
                "similarity": {"default": {"type": "BM25", "k1": 1.2, "b": 0.75}},
            }
        },
        "mappings": {
            "_meta": dict(meta or {}),
            "dynamic": "strict",
            "properties": {
                "doc_id": {"type": "keyword"},
                "chunk_id": {"type": "keyword"},
                "title": {"type": "text", "analyzer": ANALYZER},
                "text": {"type": "text", "analyzer": ANALYZER},
                "offset_start": {"type": "integer", "index": False},
                "offset_end": {"type": "integer", "index": False},
            },
        },
    }


def mapping_problems(mappings: Mapping[str, Any]) -> list[str]:
    """What keeps an index's ``mappings`` from being one ``qfarm index`` built ([] if nothing).

    The farm reads passages by these fields and ranks with this analyzer; an index made
    some other way (by hand, by another tool, by a dynamic mapping) would answer searches
    with evidence the verifier cannot check, or none, so it is refused before a run.
    """
    wanted = index_body()["mappings"]["properties"]
    found = mappings.get("properties") or {}
    problems = []
    for field, spec in wanted.items():
        have = found.get(field)
        if not isinstance(have, Mapping):
            problems.append(f"no field '{field}'")
        elif have.get("type") != spec["type"]:
            problems.append(f"field '{field}' is {have.get('type')!r}, not {spec['type']!r}")
        elif "analyzer" in spec and have.get("analyzer") != spec["analyzer"]:
            problems.append(f"field '{field}' is analyzed by {have.get('analyzer') or 'standard'!r}, "
                            f"not {spec['analyzer']!r}")
    meta = mappings.get("_meta") or {}
    if not (meta.get("index_version") or (meta.get("corpus_digest") and meta.get("chunker_version"))):
        problems.append("no _meta with the index version")
    return problems


def serving_settings(*, replicas: int = 0) -> dict[str, Any]:
    """Settings restored after a bulk load, before the alias points at the index."""
    return {"index": {"refresh_interval": "1s", "number_of_replicas": replicas}}


def index_template_body(alias: str, *, shards: int = 1, replicas: int = 1) -> dict[str, Any]:
    """A composable index template matching every versioned index of ``alias``."""
    body = index_body(shards=shards, replicas=replicas, bulk_loading=False)
    body["mappings"].pop("_meta")
    return {"index_patterns": [f"{alias.lower()}-*"], "template": body, "priority": 100}



__all__ = [
    "ANALYZER",
    "MAPPING_VERSION",
    "alias_switch_actions",
    "index_body",
    "index_template_body",
    "index_version_for",
    "is_versioned_index_of",
    "mapping_problems",
    "served_index_version",
    "serving_settings",
    "versioned_index_name",
]
