"""Text from outside (a model's reply) made safe to store and serialise."""

from __future__ import annotations

REPLACEMENT = "\ufffd"


def replace_lone_surrogates(text: str) -> str:
    """``text`` with every lone surrogate (U+D800..U+DFFF not forming a pair) replaced by
    U+FFFD; a high+low pair becomes the character it encodes.

    A Python str can hold surrogates that no UTF-8 encoder accepts (a JSON reply may
    carry ``"\\ud800"``), so one such reply would fail every serialisation of its row.
    """
    if text.isascii():
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
