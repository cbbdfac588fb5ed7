"""Query terms, index mappings and query bodies shared by every retrieval backend.

Pure: builds strings and dicts; the backends in ``worker.retrieval`` send them.
One ranking shape everywhere (``RANKING_VERSION``): BM25F, title and text
scored as one document (k1=1.2, b=0.75; a title occurrence counts
``title_boost`` times, default ×2; one IDF and one length across both
fields), English stemming, the question reduced to its content terms OR-ed
together. The embedded FTS5 index
and Elasticsearch/OpenSearch receive the same terms (see ``query_terms``), so
their top documents agree except where their BM25 variants differ
(docs/retrieval.md explains where).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from common.models import Evidence
from common.versions import CHUNKER_VERSION

# English function words plus the words questions are made of ("who", "tell me
# about", "describe"): they match nearly every passage and only add noise.
# Not the verifier's STOP_WORDS (common/verify/text.py): that set decides which
# words of a claim must be found in evidence, this one which words of a question
# are worth searching for; each is tuned, and measured, for its own job.
QUERY_STOP_WORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each either few for
    from further had has have having he her here hers herself him himself his how i if in into is
    it its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them themselves
    then there these they this those through to too under until up upon very was we were what
    whatever when where whether which while who whom whose why will with within would you your
    yours yourself yourselves tell describe explain give list name please known called s t
    know everything anything
    """.split()
)
# The mapping's analyzer: Lucene's English analyzer (possessive stemmer,
# lowercase, stop words, Porter stemmer), the nearest match to FTS5's
# ``porter unicode61`` tokenizer.
ANALYZER = "english"
SOURCE_FIELDS = ("doc_id", "chunk_id", "title", "text", "offset_start", "offset_end")
MAPPING_VERSION = "mapping-v1"
# Names the ranking shape; part of every index version, so rows say which
# ranking served them. v2: BM25F over title+text (v1: per-field BM25 added).
RANKING_VERSION = "bm25f-v2"
# Query types of the cluster backends: ``combined_fields`` is BM25F;
# ``cross_fields`` is the nearest shape on servers without it (older OpenSearch).
QUERY_TYPES = ("combined_fields", "cross_fields")
_WORD = re.compile(r"[^\W_]+")


def query_terms(question: str) -> list[str]:
    """Distinct lowercase content words of a question, in order.

    Falls back to every word when all are stop words ("The Who"), so a question
    with words always queries something.
    """
    # lower(), not casefold(): FTS5's unicode61 tokenizer folds case the same way.
    words = _WORD.findall(unicodedata.normalize("NFKC", question).lower())
    content = [w for w in words if w not in QUERY_STOP_WORDS] or words
    return list(dict.fromkeys(content))


def fts5_match_expression(question: str) -> str | None:
    """A safe FTS5 MATCH string: the question's terms, each quoted, OR-ed.

    Quoting makes every term a plain phrase, so FTS5 syntax in a question
    (``AND``, ``NEAR``, ``title:``, ``*``, parentheses, quotes) cannot change or
    break the query. ``None`` when the question has no words.
    """
    terms = query_terms(question)
    if not terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


# --------------------------------------------------------------------------- index names


def index_version_for(corpus_digest: str) -> str:
    """Index version = corpus digest (12 hex) + chunker version + ranking version."""
    return f"{corpus_digest[:12]}-{CHUNKER_VERSION}-{RANKING_VERSION}"


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


# --------------------------------------------------------------------------- mapping


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


def serving_settings(*, replicas: int = 0) -> dict[str, Any]:
    """Settings restored after a bulk load, before the alias points at the index."""
    return {"index": {"refresh_interval": "1s", "number_of_replicas": replicas}}


def index_template_body(alias: str, *, shards: int = 1, replicas: int = 1) -> dict[str, Any]:
    """A composable index template matching every versioned index of ``alias``."""
    body = index_body(shards=shards, replicas=replicas, bulk_loading=False)
    body["mappings"].pop("_meta")
    return {"index_patterns": [f"{alias.lower()}-*"], "template": body, "priority": 100}


# --------------------------------------------------------------------------- queries


def search_body(
    question: str,
    *,
    top_k: int,
    title_boost: float,
    doc_ids: Sequence[str] | None = None,
    query_type: str = "combined_fields",
) -> dict[str, Any] | None:
    """A ``_search`` body: BM25F over ``title`` (weighted ``title_boost``) and ``text``.

    ``combined_fields`` scores both fields as one document, as the embedded
    index's two-column FTS5 table does. It takes only weights >= 1, so a title
    weight below 1 is expressed as text weight ``1/title_boost`` (the same
    ratio; BM25F's length norm makes it a near, not exact, equivalent).
    ``cross_fields`` (``query_type``) is for servers without
    ``combined_fields``. ``None`` when the question has no words.
    """
    terms = query_terms(question)
    if not terms:
        return None
    if title_boost >= 1:
        fields = [f"title^{title_boost:g}", "text"]
    else:
        fields = ["title", f"text^{1 / title_boost:g}"]
    text = " ".join(terms)
    match: dict[str, Any]
    if query_type == "combined_fields":
        match = {"combined_fields": {"query": text, "fields": fields, "operator": "or"}}
    elif query_type == "cross_fields":
        match = {
            "multi_match": {"query": text, "fields": fields, "type": "cross_fields", "operator": "or"}
        }
    else:
        raise ValueError(f"query_type {query_type!r}: expected one of {QUERY_TYPES}")
    query: dict[str, Any] = match
    if doc_ids is not None:
        query = {"bool": {"must": [match], "filter": [{"terms": {"doc_id": list(doc_ids)}}]}}
    return {
        "query": query,
        "size": top_k,
        "_source": list(SOURCE_FIELDS),
        "track_total_hits": False,
        "sort": [{"_score": "desc"}, {"chunk_id": "asc"}],
    }


def msearch_body(index: str, bodies: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Header/body pairs of one ``_msearch`` request."""
    lines: list[Mapping[str, Any]] = []
    for body in bodies:
        lines.append({"index": index})
        lines.append(body)
    return lines


def evidence_from_hits(hits: Sequence[Mapping[str, Any]]) -> list[Evidence]:
    """Search hits (in rank order) → the evidence map E1..Ek."""
    out: list[Evidence] = []
    for rank, hit in enumerate(hits, start=1):
        src = hit.get("_source") or {}
        out.append(
            Evidence(
                id=f"E{rank}",
                doc_id=str(src["doc_id"]),
                chunk_id=str(src["chunk_id"]),
                title=str(src.get("title") or ""),
                text=str(src["text"]),
                score=float(hit.get("_score") or 0.0),
                offset_start=int(src["offset_start"]),
                offset_end=int(src["offset_end"]),
            )
        )
    return out


__all__ = [
    "ANALYZER",
    "MAPPING_VERSION",
    "QUERY_TYPES",
    "RANKING_VERSION",
    "SOURCE_FIELDS",
    "QUERY_STOP_WORDS",
    "alias_switch_actions",
    "evidence_from_hits",
    "fts5_match_expression",
    "index_body",
    "index_template_body",
    "index_version_for",
    "is_versioned_index_of",
    "msearch_body",
    "query_terms",
    "search_body",
    "serving_settings",
]
