"""A real search engine on this machine: one OpenSearch node (the server's jars from Maven
Central, loaded by the launcher in ``node/``) for the tests and for ``qfarm search-server``.

Opt-in (Java 17+ and Maven; ``make search-node`` builds it); how to use it and what it
costs: docs/retrieval.md, 'A real search node'. The files beside this package (the index
template, compose files) are for clusters a user runs.

* ``launch``: build the launcher once, start a node as a subprocess, wait until it serves.
"""

# The public submodules (tests/test_public_surface.py pins them).
__all__ = ["launch"]
