"""What a question becomes before any backend searches: its content terms and adjacent-word
phrases, the FTS5 MATCH string of the embedded index, and the ``_search`` bodies of the
cluster backends (and their hits read back as the evidence map).

Pure: builds strings and dicts; the backends in ``qfarm.worker.retrieval`` send them. The
embedded FTS5 index and Elasticsearch/OpenSearch receive the same terms
(``query_terms``), so their first stages agree except where their BM25 variants differ
(docs/retrieval.md explains where). How the hits are then ordered is
``qfarm.common.retrieval.ranking``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from qfarm.common.models import Evidence

# English function words plus the words questions are made of ("who", "tell me
# about", "describe"): they match nearly every passage and only add noise.
# Not the verifier's STOP_WORDS (common/grounding/verify/text.py): that set decides which
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
# Query types of the cluster backends: ``combined_fields`` is BM25F;
# ``cross_fields`` is the nearest shape on servers without it (older OpenSearch).
QUERY_TYPES = ("combined_fields", "cross_fields")
# The fields a search returns of a passage (the cluster's ``_source``).
SOURCE_FIELDS = ("doc_id", "chunk_id", "title", "text", "offset_start", "offset_end")
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


def query_phrases(question: str) -> list[str]:
    """Distinct pairs of content words adjacent in the question ("pride prejudice" is not one).

    BM25F sums terms one by one; a passage holding "string instrument" or
    "daisy family" as written matches the description better than one holding
    both words apart, and a pair is far rarer than either word.
    """
    words = _WORD.findall(unicodedata.normalize("NFKC", question).lower())
    pairs = [
        f"{a} {b}"
        for a, b in zip(words, words[1:], strict=False)
        if a not in QUERY_STOP_WORDS and b not in QUERY_STOP_WORDS
    ]
    return list(dict.fromkeys(pairs))


def fts5_phrase(text: str) -> str:
    """``text`` as one quoted FTS5 phrase: its syntax characters lose their meaning."""
    return '"' + text.replace('"', '""') + '"'

def fts5_match_expression(question: str) -> str | None:
    """A safe FTS5 MATCH string: the question's terms, each quoted, OR-ed.

    Quoting makes every term a plain phrase, so FTS5 syntax in a question
    (``AND``, ``NEAR``, ``title:``, ``*``, parentheses, quotes) cannot change or
    break the query. ``None`` when the question has no words.
    """
    terms = query_terms(question)
    if not terms:
        return None
    return " OR ".join(fts5_phrase(t) for t in terms)



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
    "QUERY_STOP_WORDS",
    "QUERY_TYPES",
    "SOURCE_FIELDS",
    "evidence_from_hits",
    "fts5_match_expression",
    "fts5_phrase",
    "msearch_body",
    "query_phrases",
    "query_terms",
    "search_body",
]
