"""Retrieval's pure half: which passages a question gets, and how good that choice was.

Corpus records parsed into documents (``corpus``), documents cut into passages
(``chunking``), query terms and search bodies
(``query``), the rerank that orders passages (``ranking``), index versions and mappings
(``index``), and recall/MRR figures over returned evidence (``evaluation``). The
backends that send these bodies and hold the indexes are in ``worker/retrieval/``.
The rules: docs/retrieval.md.
"""

# The public submodules (tests/test_public_surface.py pins them).
__all__ = ["chunking", "corpus", "evaluation", "index", "query", "ranking"]
