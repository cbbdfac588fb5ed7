"""The web viewer: runs, rows and comparisons over a results directory, as HTML pages.

``Viewer.handle`` maps a request path and query to a ``Response`` without any
server in the loop, so ``qfarm view`` (standard-library HTTP server, here) and a
later front-door server can both mount it.
"""

# The public submodules (tests/test_public_surface.py pins them).
__all__ = ["router", "server"]
