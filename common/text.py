"""Text from outside (a model's reply) made safe to store and serialise."""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"

# C0 controls but tab, newline and carriage return, and DEL: a question file, a row or a
# server's error may carry them (NUL included); markdown and HTML have no place for them
# (NUL is an HTML parse error).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def replace_control_chars(text: str) -> str:
    """``text`` with every control character but tab, newline and CR replaced by U+FFFD."""
    return _CONTROL.sub(REPLACEMENT, text)


def replace_lone_surrogates(text: str) -> str:
    """``text`` with every lone surrogate (U+D800..U+DFFF not forming a pair) replaced by
    U+FFFD; a high+low pair becomes the character it encodes.

    A Python str can hold surrogates that no UTF-8 encoder accepts (a JSON reply may
    carry ``"\\ud800"``), so one such reply would fail every serialisation of its row.
    """
    if text.isascii():
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def replace_lone_surrogates_in(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, strings, numbers) with ``replace_lone_surrogates``
    applied to every string in it, keys included."""
    if isinstance(value, str):
        return replace_lone_surrogates(value)
    if isinstance(value, dict):
        return {replace_lone_surrogates_in(k): replace_lone_surrogates_in(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [replace_lone_surrogates_in(v) for v in value]
    return value
