"""The build steps pyproject.toml cannot declare: one import name, and the question sets.

The checkout's ``common/``, ``worker/``, ``producer/`` and ``ops/`` install as
``qfarm.common`` ... ``qfarm.ops`` (a ``package_dir`` mapping computed here).

``bench/questions/`` is the repository's one copy of the question sets; the build copies
its ``*.jsonl`` and ``*.txt`` into the built package's ``qfarm/sets/`` folder, which
``qfarm/question_sets.py`` reads in an installed qfarm (``qfarm sets``, ``qfarm sweep
smoke``). Nothing is copied into the source tree, so the two cannot drift.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SOURCE = ROOT / "bench" / "questions"
SUFFIXES = (".jsonl", ".txt")


class BuildWithQuestionSets(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "qfarm" / "sets"
        target.mkdir(parents=True, exist_ok=True)
        for path in sorted(SOURCE.iterdir()):
            if path.suffix in SUFFIXES:
                shutil.copyfile(path, target / path.name)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        target = Path(self.build_lib) / "qfarm" / "sets"
        sets = [str(target / p.name) for p in sorted(SOURCE.iterdir()) if p.suffix in SUFFIXES]
        return [*super().get_outputs(include_bytecode), *sets]


# The repository keeps the design's top-level folders; the installed distribution puts them
# under one import name, so a user's environment gains ``qfarm`` and nothing as generic as
# ``common`` or ``worker`` (other distributions use those names). ``bench`` is not shipped.
FOLDERS = ("common", "worker", "producer", "ops")
# Folders of data files only, shipped as packages of their own (pyproject.toml's
# package-data says which files): setuptools warns about data folders inside a package
# that the package list does not name.
DATA_PACKAGES = ("qfarm.producer.viewer.static", "qfarm.ops.supervisor", "qfarm.ops.systemd")


def qfarm_packages() -> tuple[list[str], dict[str, str]]:
    packages = find_packages(where=str(ROOT), include=["qfarm", "qfarm.*"])
    package_dir = {"qfarm": "qfarm"}
    for folder in FOLDERS:
        package_dir[f"qfarm.{folder}"] = folder
        found = find_packages(where=str(ROOT), include=[folder, f"{folder}.*"])
        packages += [f"qfarm.{name}" for name in found]
    return [*packages, *DATA_PACKAGES], package_dir


PACKAGES, PACKAGE_DIR = qfarm_packages()

setup(
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    cmdclass={"build_py": BuildWithQuestionSets},
)
