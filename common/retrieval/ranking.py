"""How passages are ranked for a question: query terms, the rerank, rank fusion, and the
index mappings and query bodies every retrieval backend sends.

Pure: builds strings and dicts; the backends in ``qfarm.worker.retrieval`` send them.
One ranking shape everywhere (``RANKING_VERSION``): BM25F, title and text
scored as one document (k1=1.2, b=0.75; a title occurrence counts
``title_boost`` times, default ×2; one IDF and one length across both
fields), English stemming, the question reduced to its content terms OR-ed
together; then a second stage, the same pure function for every backend
(``rerank_order``), re-scores the first stage's top ``RERANK_DEPTH`` by the
share of the question's terms each passage holds, the adjacent-word
phrases it holds as written and, for an article's first passage, the share
its first sentence holds and, for a passage whose article title the
question names, a title factor; the first stage's best half of the ``top_k``
stay in. The embedded FTS5 index and
Elasticsearch/OpenSearch receive the same terms (see ``query_terms``), so
their top documents agree except where their BM25 variants differ
(docs/retrieval.md explains where).
"""

from __future__ import annotations

import functools
import heapq
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from qfarm.common.models import Evidence
from qfarm.common.versions import CHUNKER_VERSION

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
# The mapping's analyzer: Lucene's English analyzer (possessive stemmer,
# lowercase, stop words, Porter stemmer), the nearest match to FTS5's
# ``porter unicode61`` tokenizer.
ANALYZER = "english"
SOURCE_FIELDS = ("doc_id", "chunk_id", "title", "text", "offset_start", "offset_end")
MAPPING_VERSION = "mapping-v1"
# Names the ranking shape; part of every index version, so rows say which
# ranking served them. v2: BM25F over title+text (v1: per-field BM25 added);
# v3: every backend re-ranks its BM25F top ``RERANK_DEPTH`` by term coverage
# and adjacent-word phrases (``rerank_order``); v4: and by the terms an
# article's first sentence holds (``LEAD_BONUS``), the first stage's best
# ``top_k // 2`` kept (``rerank_order``); v5: and a passage whose title the
# question names (``TITLE_BONUS``), one-term questions included, kept when
# BM25F put it in the ``top_k``; the window cut to 25.
RANKING_VERSION = "bm25f-v5"
# The opt-in dense stage (``qfarm index --dense``, embedded index only): the
# lexical top ``DENSE_DEPTH`` and the ``DENSE_DEPTH`` passages whose
# all-MiniLM-L6-v2 vectors are nearest the question's, fused by reciprocal rank
# (``fuse_ranks``). Its own ranking name, so a row says which served it.
DENSE_RANKING_VERSION = f"{RANKING_VERSION}+minilm-rrf"
# Both lists are 30 long (the lexical re-ranking window was 30 when this was
# measured; the dense path still fetches 30); RRF_K 10 and 60 were tried on
# bench/questions/independent_tune.jsonl: 10 found 15 more answers (0.921 against 0.906).
DENSE_DEPTH = 30
RRF_K = 10
# Stage 2 of every backend (measured on bench/questions/independent_tune.jsonl,
# docs/retrieval.md): the BM25F top 25 re-scored. v5's ranking answers the same
# tuning questions from the top 25 as from the top 30 (893), and the same article
# comes first for generated questions naming it; 20 loses 2. A deeper window
# found no more answers in v3 (50: recall@8 0.880 against 0.881). Each passage
# costs a stage-2 scan, so the smallest window that loses nothing is kept.
RERANK_DEPTH = 25
# Each adjacent-word phrase of the question found in a passage multiplies its
# score by (1 + PHRASE_BONUS): 0.25, 0.5 and 1.0 were tried, 0.5 kept.
PHRASE_BONUS = 0.5
# An article's first passage: its score x (1 + LEAD_BONUS x the share of the
# question's terms its title and first sentence hold). An encyclopedia's first
# sentence says what the subject is ("X is a genus of flowering plants ..."),
# which is what a description-shaped question asks. 0.25 / 0.5 / 1 / 2 / 4 were
# tried on bench/questions/independent_tune.jsonl (docs/retrieval.md): 0.5 and up
# within 4 questions of each other; 0.5 kept, as it changes the first passage of
# fewer hand-written questions (bench/questions/general.jsonl: 5 against 8 for 1).
LEAD_BONUS = 0.5
# A passage whose article title (without a trailing "(...)") the question names,
# every word of it ("Who wrote Pride and Prejudice?", "What is Science?"): its
# score x (1 + TITLE_BONUS). On bench/questions/independent_named.jsonl the named
# article came first for 0.862 of the questions with v4, 0.965 with it. 0.25 / 0.5 /
# 1 were tried; on description-shaped questions (independent_tune.jsonl) 0.5 costs
# one answer in 1,000 and some first places (article hit@1 0.645 -> 0.618), 1 costs
# more (docs/retrieval.md, 'Ranking shape and parity', under "What v5 added").
TITLE_BONUS = 0.5
# Query types of the cluster backends: ``combined_fields`` is BM25F;
# ``cross_fields`` is the nearest shape on servers without it (older OpenSearch).
QUERY_TYPES = ("combined_fields", "cross_fields")
_WORD = re.compile(r"[^\W_]+")
_TITLE_QUALIFIER = re.compile(r"\s*\([^)]*\)\s*$")


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


_SUFFIXES = ("ing", "ed", "es", "s")


def _root(word: str) -> str:
    # A light suffix strip, not Porter: the pattern below matches any word
    # starting with the root, so "mountain" finds "mountains" and "species" "species".
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


# U+0300..U+036F, the combining diacritical marks: dropped after NFD, so "dvořák"
# reads "dvorak", as FTS5's ``remove_diacritics 2`` folds it (``re.sub``: ~4x
# faster than ``str.translate`` on a passage, measured).
_DIACRITICS = re.compile("[\u0300-\u036f]+")
# Latin letters with diacritics (Latin-1 Supplement to Latin Extended-B, and the
# combining marks): text without any needs no folding.
_ACCENTED = re.compile("[\u00c0-\u024f\u0300-\u036f]")


def _fold(text: str) -> str:
    """Text without its diacritics (``text`` itself when it has none to drop)."""
    if text.isascii() or not _ACCENTED.search(text):  # isascii first: a plain C scan
        return text
    return _DIACRITICS.sub("", unicodedata.normalize("NFD", text))


@functools.lru_cache(maxsize=1 << 16)
def title_roots(title: str) -> frozenset[str]:
    """The roots of a title's query terms, its trailing qualifier dropped ("Queen (band)" -> queen).

    Cached: the same titles come back question after question, and a corpus
    holds a bounded number of them.
    """
    return frozenset(_fold(_root(t)) for t in query_terms(_TITLE_QUALIFIER.sub("", title)))


def _word_start(text: str, root: str, at: int = 0) -> int:
    """Index of the first word of ``text`` at or after ``at`` starting with ``root``; -1 if none.

    ``str.find`` runs at C speed; the loop only skips matches inside a word.
    """
    at = text.find(root, at)
    while at > 0 and text[at - 1].isalnum():
        at = text.find(root, at + 1)
    return at


def _holds_phrase(text: str, first: str, second: str) -> bool:
    """Whether a word starting with ``first`` is followed, past non-word characters, by
    one starting with ``second`` ("string instruments", "daisy-family")."""
    n = len(text)
    at = _word_start(text, first)
    while at >= 0:
        end = at + len(first)
        while end < n and text[end].isalnum():
            end += 1
        gap = end
        while gap < n and not text[gap].isalnum():
            gap += 1
        if gap > end and text.startswith(second, gap):
            return True
        at = _word_start(text, first, at + 1)
    return False


class Holdings:
    """Which of a question's terms and adjacent-word phrases a passage holds (stage 2).

    Matched in Python on the candidates' stored text. FTS5 can say which
    phrases matched a row only by running one query per phrase (about x2 the
    whole first stage, measured), and a regular expression with one
    alternative per term cost ~3 ms per question, one per phrase ~40 us to
    compile; a substring search per root costs a few microseconds per
    passage. The stems are approximate: a word matches a term when it starts
    with the term's root (``_root``), lowercased and without diacritics, as
    FTS5 folds them.
    """

    def __init__(self, question: str):
        self.terms = query_terms(question)
        self.phrases = query_phrases(question)
        self._roots = [_fold(_root(t)) for t in self.terms]
        self._root_set = frozenset(self._roots)
        index = {t: i for i, t in enumerate(self.terms)}
        self._phrases = [
            (index[first], index[second])
            for first, second in (phrase.split(" ") for phrase in self.phrases)
        ]

    def names(self, title: str) -> bool:
        """Whether the question names ``title``: holds a term of each of its words' roots."""
        roots = title_roots(title)
        return bool(roots) and roots <= self._root_set

    def find(self, text: str) -> tuple[dict[int, int], int]:
        """({term index: where its first word in ``text`` starts}, distinct phrases held).

        The offsets are into the lowercased text, or into its diacritic-folded
        form for the terms found only there (the same offsets for Latin letters).
        """
        low = text.lower()
        roots = self._roots
        held = self._held(low, range(len(roots)))
        if len(held) < len(roots):
            # Fold only when a term is missing and the text has diacritics to drop (~5 us).
            folded = _fold(low)
            if folded is not low:
                low = folded
                held |= self._held(low, [i for i in range(len(roots)) if i not in held])
        phrases = sum(
            1
            for a, b in self._phrases
            if a in held and b in held and _holds_phrase(low, roots[a], roots[b])
        )
        return held, phrases

    def _held(self, low: str, which: Iterable[int]) -> dict[int, int]:
        held = {}
        find = low.find
        for i in which:
            root = self._roots[i]
            at = find(root)
            # The common cases inline (absent; at a word start), the rest in _word_start.
            if at > 0 and low[at - 1].isalnum():
                at = _word_start(low, root, at + 1)
            if at >= 0:
                held[i] = at
        return held


class Candidate(NamedTuple):
    """A first-stage hit as stage 2 reads it."""

    score: float  # the first stage's, >= 0, higher is better
    title: str
    text: str
    lead: bool = False  # the passage starts its article (offset 0): it holds the first sentence


# A sentence ends at ., ! or ? after a lowercase letter, digit or ")", before
# white space and a capital ("3.5", "e.g. the" and "U.S. Navy" do not end one).
_STOP_BEFORE_CAPITAL = re.compile(r"[.!?]\s+[A-Z]")


def first_sentence_end(text: str) -> int:
    """Length of ``text``'s first sentence, its full stop included (``len(text)`` if none ends)."""
    # The character before the stop is checked in Python: ~2 us a passage against ~4 us
    # for a look-behind in the pattern, which the engine tries at every space.
    for match in _STOP_BEFORE_CAPITAL.finditer(text):
        at = match.start()
        before = text[at - 1] if at else ""
        if before.isascii() and (before.islower() or before.isdigit() or before == ")"):
            return at + 1
    return len(text)


def rerank_score(
    bm25f: float,
    *,
    matched_terms: int,
    terms: int,
    matched_phrases: int,
    lead_terms: int = 0,
    named: bool = False,
) -> float:
    """Stage-2 score of a passage from its BM25F score (higher is better).

    Scaled by the share of the question's terms the passage holds (an OR of
    terms lets one frequent word outscore a passage holding all of them),
    raised by ``PHRASE_BONUS`` per adjacent-word phrase it holds as written,
    for an article's first passage by ``LEAD_BONUS`` x the share of the
    terms its title and first sentence hold (``lead_terms``), and by
    ``TITLE_BONUS`` when the question names its title (``named``).
    """
    title = 1.0 + TITLE_BONUS if named else 1.0
    if not terms:
        return bm25f * title
    coverage = min(matched_terms, terms) / terms
    lead = min(lead_terms, terms) / terms
    return (
        bm25f
        * coverage
        * (1.0 + PHRASE_BONUS * matched_phrases)
        * (1.0 + LEAD_BONUS * lead)
        * title
    )


def _stage2_score(holdings: Holdings, candidate: Candidate) -> float:
    title = candidate.title
    if len(holdings.terms) < 2:
        # One term: stage 1 matched it in every candidate (through the index's
        # Porter stems, which the roots here only approximate), and there is
        # no phrase; only the title can tell "Science" from "Computer science".
        named = holdings.names(title)
        return rerank_score(
            candidate.score, matched_terms=0, terms=0, matched_phrases=0, named=named
        )
    held, phrases = holdings.find(f"{title}\n{candidate.text}")
    # Only a title holding a term can be named: the positions say so for free,
    # and three candidates in four hold none in their title (measured).
    named = bool(held) and min(held.values()) < len(title) and holdings.names(title)
    lead = 0
    if candidate.lead and held:
        # A term's first word lies in the title or first sentence: one pass over the text.
        end = len(title) + 1 + first_sentence_end(candidate.text)
        lead = sum(1 for at in held.values() if at < end)
    return rerank_score(
        candidate.score,
        matched_terms=len(held),
        terms=len(holdings.terms),
        matched_phrases=phrases,
        lead_terms=lead,
        named=named,
    )


def rerank_order(
    question: str,
    candidates: Sequence[Candidate],
    top_k: int,
    *,
    keep_first: int | None = None,
) -> list[tuple[int, float]]:
    """Stage 2 of every backend: the best ``top_k`` as (index into ``candidates``, new score).

    ``candidates`` are the first stage's hits in its rank order. The first
    ``keep_first`` of them (default ``top_k // 2``), and those of its first
    ``top_k`` whose title the question names (leaving one place free), stay
    in the ``top_k`` whatever their new score: stage 2 fills the other places
    and orders all of them.
    Stage 2 is a rule of thumb; BM25F's best few are right more often than
    stage 2 moves them out (kept: 19 -> 10 tuning questions that stage 1
    alone found and the ranking lost; docs/retrieval.md), and the article a
    question names, once BM25F put it in the evidence, is the subject asked
    about ("founding members of Queen": *Queen (band)*, whose passage holds
    neither "founding" nor "members"). Equal new
    scores keep the first stage's order, so each backend's own tie-break
    (rowid, ``chunk_id``) carries over. The scale of the first-stage score
    does not matter: stage 2 multiplies it. A candidate cannot score more
    than its first-stage score x the largest factor stage 2 gives, and the
    first-stage scores fall, so matching stops once that bound cannot reach
    the last free place's score, and skips a passage whose own bound (no
    first sentence) cannot: the same answer, less text read.
    """
    holdings = Holdings(question)
    keep = max(0, min(top_k // 2 if keep_first is None else keep_first, top_k))
    staying = set(range(min(keep, len(candidates))))
    # One place stays free, so the best new score is always among the top_k and
    # the first passage is the same whatever top_k a caller asks for.
    room = top_k - keep - 1
    for i in range(keep, min(top_k, len(candidates))):
        if room <= 0:
            break
        if holdings.names(candidates[i].title):
            staying.add(i)
            room -= 1
    free = top_k - len(staying)
    last_staying = max(staying, default=-1)
    # The largest factor stage 2 can give: phrases, first sentence (not for one
    # term: _stage2_score), title.
    phrase_factor = 1.0 + PHRASE_BONUS * len(holdings.phrases)
    lead_factor = 1.0 if len(holdings.terms) < 2 else 1.0 + LEAD_BONUS
    title_factor = 1.0 + TITLE_BONUS
    other_factor = phrase_factor * title_factor  # a passage that does not start its article
    best_factor = other_factor * lead_factor
    kept: list[tuple[int, float]] = []
    rest: list[tuple[int, float]] = []
    best: list[float] = []  # min-heap of the best ``free`` new scores past the kept ones
    for i, candidate in enumerate(candidates):
        if i in staying:
            kept.append((i, _stage2_score(holdings, candidate)))
            continue
        if not free or (len(best) == free and candidate.score * best_factor <= best[0]):
            if i > last_staying:
                break  # neither it nor any later (lower) candidate can take a free place
            continue  # nor this one, but a named one further down stays
        if len(best) == free and not candidate.lead and candidate.score * other_factor <= best[0]:
            continue  # it cannot, but a later one starting its article might
        new = _stage2_score(holdings, candidate)
        rest.append((i, new))
        if len(best) < free:
            heapq.heappush(best, new)
        else:
            heapq.heappushpop(best, new)
    rest.sort(key=lambda item: -item[1])  # stable: ties keep the first stage's order
    chosen = kept + rest[:free]
    chosen.sort(key=lambda item: (-item[1], item[0]))
    return chosen


def rerank_hits(
    question: str, hits: Sequence[Mapping[str, Any]], top_k: int
) -> list[Mapping[str, Any]]:
    """The best ``top_k`` of a cluster's first-stage hits after stage 2, ``_score`` replaced."""
    candidates = []
    for h in hits:
        src = h.get("_source") or {}
        candidates.append(
            Candidate(
                float(h.get("_score") or 0.0),
                str(src.get("title") or ""),
                str(src.get("text") or ""),
                lead=src.get("offset_start") == 0,
            )
        )
    return [{**hits[i], "_score": score} for i, score in rerank_order(question, candidates, top_k)]


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


# --------------------------------------------------------------------------- index names


def index_version_for(corpus_digest: str, *, dense: bool = False) -> str:
    """Index version = corpus digest (12 hex) + chunker version + ranking version."""
    ranking = DENSE_RANKING_VERSION if dense else RANKING_VERSION
    return f"{corpus_digest[:12]}-{CHUNKER_VERSION}-{ranking}"


def fuse_ranks(ranked_lists: Sequence[Sequence[int]], *, k: int = RRF_K) -> list[tuple[int, float]]:
    """Reciprocal-rank fusion: (item, sum of 1 / (k + rank)) over the lists, best first.

    Ranks, not scores, are summed: BM25F scores and cosine similarities have no
    common scale. Ties keep the order in which items were first seen (the
    first list's order first).
    """
    scores: dict[int, float] = {}
    for ranked in ranked_lists:
        for rank, item in enumerate(ranked, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])


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
    "Candidate",
    "Holdings",
    "LEAD_BONUS",
    "MAPPING_VERSION",
    "PHRASE_BONUS",
    "QUERY_TYPES",
    "DENSE_DEPTH",
    "DENSE_RANKING_VERSION",
    "RANKING_VERSION",
    "RRF_K",
    "RERANK_DEPTH",
    "SOURCE_FIELDS",
    "QUERY_STOP_WORDS",
    "alias_switch_actions",
    "evidence_from_hits",
    "first_sentence_end",
    "fts5_match_expression",
    "fts5_phrase",
    "index_body",
    "index_template_body",
    "fuse_ranks",
    "index_version_for",
    "is_versioned_index_of",
    "msearch_body",
    "query_phrases",
    "query_terms",
    "rerank_hits",
    "rerank_order",
    "rerank_score",
    "search_body",
    "served_index_version",
    "serving_settings",
]
