"""The import rules of docs/architecture.md, 'The folders': which folder may import which.

Each product area may import only the areas listed for it (and itself); ``common/`` and its
subpackages import no I/O library; nothing in the product imports bench/ (question sets,
results, benchmarks only); and nothing anywhere imports the folders by their bare names
(``common``, ``worker``...): the installed distribution has only ``qfarm.common`` and so on,
and a checkout that imported both would hold two copies of every module.

Areas are named by folder (``common.grounding`` is ``qfarm.common.grounding``).

Celery stays in one module, ``qfarm.worker.celery`` (the app and its tasks, which
``celery -A qfarm.worker`` finds): every other module imports without it.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("common", "worker", "producer", "ops", "qfarm")
FOLDERS = ("common", "worker", "producer", "ops")  # installed as qfarm.<folder>
COMMON = ("common", "common.grounding", "common.retrieval", "common.reporting")
PRODUCER_BASE = ("producer.interrupts", "producer.rundir", "producer.store")

# area: the other areas it may import. An area is a top-level folder, or one of common/'s
# subpackages (common/ itself being its top-level modules, the contracts).
MAY_IMPORT: dict[str, set[str]] = {
    "common": set(),
    "common.grounding": {"common"},
    "common.retrieval": {"common", "common.grounding"},
    "common.reporting": {"common", "common.grounding"},
    "worker": set(COMMON),
    "ops": set(COMMON),
    # producer/ by what it does. Its shared infrastructure (the Redis store, the run
    # directory's files, Ctrl-C) sits below everything; the command line and the HTTP app
    # reach runs, the farm and reports through the one front, producer.api.
    "producer.interrupts": set(),
    "producer.rundir": set(COMMON),
    "producer.store": {*COMMON, "producer.rundir"},
    "producer.reports": {*COMMON, "worker", "producer.rundir"},
    "producer.runs": {*COMMON, "worker", *PRODUCER_BASE, "producer.reports"},
    "producer.farm": {*COMMON, "worker", *PRODUCER_BASE, "producer.runs"},
    "producer.api": {*COMMON, "worker", "producer.runs", "producer.farm", "producer.reports"},
    "producer": {"producer.api"},
    "producer.viewer": {*COMMON, "worker", *PRODUCER_BASE, "producer.reports", "producer.http"},
    "producer.http": {*COMMON, "worker", *PRODUCER_BASE, "producer.api", "producer.viewer"},
    "qfarm": {*COMMON, "worker", "ops", "producer", "producer.api", "producer.http",
              "producer.viewer", "producer.interrupts"},
}
CELERY_APP = "worker/celery.py"  # the one module that imports Celery
# Libraries that do I/O or talk to a service: common/ is pure, so none of them there.
IMPURE = {
    "aiohttp", "celery", "elasticsearch", "fastapi", "httpx", "kombu", "opensearchpy",
    "redis", "requests", "socket", "sqlite3", "subprocess", "urllib3", "uvicorn",
}  # fmt: skip


def _raw_imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
            # from qfarm.common import keys: the module is qfarm.common.keys
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def _imports(path: Path) -> list[str]:
    """The imported modules, named by area: ``qfarm.common.keys`` is ``common.keys``."""
    names = []
    for name in _raw_imports(path):
        head, _, rest = name.partition(".")
        if head == "qfarm" and rest.split(".")[0] in FOLDERS:
            name = rest
        names.append(name)
    return names


def _area(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "common" and len(parts) > 1 and f"common.{parts[1]}" in COMMON:
        return f"common.{parts[1]}"
    if parts[0] == "producer" and len(parts) > 1 and f"producer.{parts[1]}" in MAY_IMPORT:
        return f"producer.{parts[1]}"
    return parts[0]


def _module(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def _files(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def test_every_area_has_a_rule() -> None:
    areas = {_area(_module(path)) for package in PRODUCT for path in _files(package)}
    assert areas == set(MAY_IMPORT)


@pytest.mark.parametrize("package", PRODUCT)
def test_areas_import_only_what_their_rule_allows(package: str) -> None:
    offenders = []
    for path in _files(package):
        area = _area(_module(path))
        for name in _imports(path):
            if name.split(".")[0] not in (*PRODUCT, "bench"):
                continue
            target = _area(name)
            if target == "producer" and area.startswith("producer."):
                continue  # `from qfarm.producer import interrupts`: the package, not its front
            if target != area and target not in MAY_IMPORT[area]:
                offenders.append(f"{path.relative_to(REPO)}: {name} ({area} may not import {target})")
    assert offenders == []


def test_common_imports_no_io_library() -> None:
    offenders = [
        f"{path.relative_to(REPO)}: {name}"
        for path in _files("common")
        for name in _imports(path)
        if name.split(".")[0] in IMPURE
    ]
    assert offenders == []


def test_product_does_not_import_bench() -> None:
    offenders = [
        f"{path.relative_to(REPO)}: {name}"
        for package in PRODUCT
        for path in _files(package)
        for name in _imports(path)
        if name == "bench" or name.startswith("bench.")
    ]
    assert offenders == []


def test_nothing_imports_the_folders_by_their_bare_names() -> None:
    offenders = [
        f"{path.relative_to(REPO)}: {name}"
        for package in (*PRODUCT, "bench", "tests")
        for path in _files(package)
        for name in _raw_imports(path)
        if name.split(".")[0] in FOLDERS
    ]
    assert offenders == []


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_bare_import_of_a_folder_fails_with_the_name_to_use(folder: str) -> None:
    # celery -A worker, python -m ops.sim: an import statement test cannot see those.
    done = subprocess.run([sys.executable, "-c", f"import {folder}"], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode != 0
    assert f"import qfarm.{folder}, not {folder}" in done.stderr


def test_the_folders_load_from_the_checkout_under_test() -> None:
    # An editable install of another checkout maps qfarm.* there; the finder beside this
    # qfarm/ must win, or a test would run another tree's code without saying so.
    import importlib

    for folder in FOLDERS:
        module = importlib.import_module(f"qfarm.{folder}")
        assert Path(module.__file__ or "").resolve().is_relative_to(REPO), module.__file__


def _product_modules() -> list[str]:
    """Every module of the product by its installed name (``__main__`` left out)."""
    names = []
    for package in PRODUCT:
        for path in _files(package):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] != "__main__":
                name = ".".join(parts).removesuffix(".__init__")
                names.append(f"qfarm.{name}" if parts[0] in FOLDERS else name)
    return names


def test_only_the_celery_app_module_imports_celery() -> None:
    importers = sorted(
        str(path.relative_to(REPO))
        for package in PRODUCT
        for path in _files(package)
        if any(name.split(".")[0] == "celery" for name in _raw_imports(path))
    )
    assert importers == [CELERY_APP]


def test_every_module_but_the_celery_app_imports_without_celery() -> None:
    app = "qfarm." + CELERY_APP.removesuffix(".py").replace("/", ".")
    modules = [m for m in _product_modules() if m != app]
    assert len(modules) > 100 and "qfarm.worker.flow" in modules and "qfarm.producer.api" in modules
    # One fresh interpreter imports them all, in order, and names the first that loads Celery.
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "    if 'celery' in sys.modules:\n"
        "        sys.exit('celery imported by ' + name)\n"
        "print(len(sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_celery_finds_the_app_by_the_package_name() -> None:
    # `celery -A qfarm.worker` resolves the package to its `celery` module (Celery's
    # find_app), so every worker command line names the package.
    code = ("from celery.app.utils import find_app; app = find_app('qfarm.worker'); "
            "import sys; print(app.main, sys.modules[app.tasks['qfarm.retrieve'].__module__].__file__)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    main, path = done.stdout.split()
    assert main == "qfarm" and Path(path).resolve() == REPO / CELERY_APP
