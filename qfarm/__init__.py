"""qfarm: the one import name of the farm.

An installed qfarm holds ``qfarm.common``, ``qfarm.worker``, ``qfarm.producer`` and
``qfarm.ops`` (setup.py maps the repository's top-level folders there), the command line
(``qfarm.cli``) and the shipped question sets (``question_sets.py``).

In a checkout those folders sit beside this one, not inside it: the package's search path
finds them (a small import finder), so ``import qfarm.common`` loads ``<checkout>/common``
whether the checkout is on ``sys.path`` or installed in editable mode. Only those four
folders are found that way: nothing else at the checkout's top (``bench``, ``tests``,
``setup.py``) becomes part of the package.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

# The public submodules (tests/test_public_surface.py pins them). The command modules are the
# CLI's own; ``qfarm.cli:main`` is the console entry.
__all__ = ["cli"]

_FOLDERS = ("common", "worker", "producer", "ops")


class _CheckoutFolders(importlib.abc.MetaPathFinder):
    """Finds ``qfarm.<folder>`` at ``<checkout>/<folder>``; its subpackages follow from there."""

    def __init__(self, checkout: Path) -> None:
        self.checkout = checkout

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        prefix, _, name = fullname.partition(".")
        if prefix != __name__ or name not in _FOLDERS:
            return None
        folder = self.checkout / name
        return importlib.util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )


def _find_checkout_folders() -> None:
    here = Path(__file__).resolve().parent
    if (here / "common").is_dir():  # an installed tree: the folders are already inside
        return
    checkout = here.parent
    if not all((checkout / name / "__init__.py").is_file() for name in _FOLDERS):
        return
    if not any(isinstance(f, _CheckoutFolders) for f in sys.meta_path):
        # First: the folders beside this qfarm/ are this checkout's, even when an editable
        # install of another checkout (whose finder maps qfarm.* there) is in the environment.
        sys.meta_path.insert(0, _CheckoutFolders(checkout))


_find_checkout_folders()
