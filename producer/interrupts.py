"""Ctrl-C that cannot be lost while a run is followed.

Python raises ``KeyboardInterrupt`` wherever the main thread happens to be when
SIGINT arrives. If that is inside a finalizer (a ``__del__`` or a weakref
callback, which garbage collection runs between any two lines), the exception
is printed as "Exception ignored in …" and dropped: a follower would go on
following a run that may never end. ``install()`` (the ``qfarm`` command line)
keeps a flag beside the exception; a loop that runs until a run ends calls
``check()``, which raises the ``KeyboardInterrupt`` again if one was dropped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from types import FrameType

_requested = threading.Event()


STOPPING = "qfarm: stopping… (the run keeps the rows it has)"


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    if not _requested.is_set():
        _say_stopping()
    _requested.set()
    raise KeyboardInterrupt


def _say_stopping() -> None:
    """Say at once that the stop was heard: ending a run's threads takes seconds."""
    try:
        sys.stderr.write(f"\n{STOPPING}\n")
        sys.stderr.flush()
    except (RuntimeError, OSError, ValueError):
        # The signal came while the main thread was writing to stderr (a reentrant call
        # into its buffer), or stderr is closed: write past the buffer.
        with contextlib.suppress(OSError):
            os.write(2, f"\n{STOPPING}\n".encode())


def install() -> None:
    """Handle SIGINT as Python does, and remember it (main thread only, as signals are).

    SIGTERM (``kill``, a supervisor stopping the command) is handled the same way: by
    default it ends the process on the spot, leaving an eager run's status.json saying
    "running"; as a KeyboardInterrupt the run ends as interrupted, with its rows."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)
        signal.signal(signal.SIGTERM, _on_sigint)


def check() -> None:
    """Raise ``KeyboardInterrupt`` once for a Ctrl-C that came and was not handled yet.

    Only in the main thread, where Python raises it: a follow thread of ``qfarm serve``
    must not end with a traceback because the server was stopped."""
    if _requested.is_set() and threading.current_thread() is threading.main_thread():
        _requested.clear()
        raise KeyboardInterrupt


def handled() -> None:
    """The ``KeyboardInterrupt`` was caught where it belongs: forget the Ctrl-C."""
    _requested.clear()
