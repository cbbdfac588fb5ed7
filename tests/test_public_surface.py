"""The product's public surface, pinned: a change to what a package exports, or to which of
its modules other packages may import, fails here until this file says so.

Each package has ``__all__``: the names a front package re-exports (``producer``,
``worker``, ...), or the public submodules of a package that is a namespace of modules
(``common``, ``qfarm.common.grounding``, ...). Its other modules are internal: only its own
package imports them (``_``-prefixed ones are internal without being listed). Tests and
bench/ may reach inside; the product may not.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("common", "worker", "producer", "ops", "qfarm")
FOLDERS = ("common", "worker", "producer", "ops")  # installed as qfarm.<folder>

# package: (its __all__, its internal modules: imported only from inside the package)
SURFACE: dict[str, tuple[list[str], list[str]]] = {
    "qfarm.common": (
        ["backoff", "cache", "errors", "grounding", "jobs", "keys", "logs", "metrics", "models", "policy", "profiles",
         "questions", "record", "reporting", "retrieval", "runstatus", "settings", "text", "traces",
         "urls",
         "versions", "vocab"],
        ["redis_urls"],
    ),
    "qfarm.common.grounding": (
        ["gold", "grammars", "names", "preflight", "prompts", "quantifier", "rows", "sidecar",
         "verify"],
        ["denials", "gates", "reminders"],
    ),
    "qfarm.common.grounding.verify": (
        ["DEFLECTION_PATTERNS", "verify_answer"],
        ["checks", "claims", "quote", "verifier"],
    ),
    "qfarm.common.retrieval": (["chunking", "corpus", "evaluation", "index", "query", "ranking"], []),
    "qfarm.common.reporting": (
        ["audit", "compare", "cost", "phase", "report", "run_metrics", "runstats", "stats"], []
    ),
    "qfarm.worker": (
        ["broker", "celery", "llm", "retrieval", "runner", "services", "store", "tracing"],
        ["encoding", "flow", "leases", "metrics", "pipeline", "stages"],
    ),
    "qfarm.worker.llm": (
        ["Gateway", "MemoryResponseCache", "RedisResponseCache", "ResponseStore", "open_gateway",
         "process_response_cache"],
        ["admission", "balancer", "batcher", "bridge", "dispatch", "gateway", "health",
         "replies", "response_cache", "retry", "transport"],
    ),
    "qfarm.worker.retrieval": (
        ["Retriever", "ensure_default_index", "open_retriever"],
        ["corpus_file", "default_corpus", "elasticsearch", "opensearch", "postings"],
    ),
    # The Python API: qfarm.producer.api is the one surface the command line and the HTTP
    # app use, a front over the packages below; only producer's own packages import those.
    "qfarm.producer": (
        ["Answer", "Endpoints", "QuestionSet", "RunResult", "SweepSpec", "ask",
         "configured_endpoints", "follow_run", "retry_errors", "run_sweep"],
        ["farm", "reports", "rundir", "runs", "store"],
    ),
    "qfarm.producer.runs": (
        ["ask", "consumers", "control", "eager", "endpoints", "follow", "launch", "outcome",
         "retry", "services", "types"],
        ["aggregator", "capacity", "distributed", "lease", "sweep"],
    ),
    "qfarm.producer.farm": (["cache", "doctor", "index", "status"], []),
    "qfarm.producer.reports": (["compare", "exports", "record", "rows", "summary"], []),
    "qfarm.producer.reports.exports": (
        ["AFTER_RUN", "EXPORTS", "export_after_run", "export_lines", "read_exports",
         "record_export"],
        ["record"],
    ),
    "qfarm.producer.http": (
        ["app", "auth"], ["errors", "metrics", "middleware", "requests", "runs", "schemas"]
    ),
    "qfarm.producer.viewer": (
        ["router", "server"],
        ["compare", "export", "gold", "html", "index", "live", "pages", "reread", "row",
         "source", "svg"],
    ),
    "qfarm.producer.viewer.pages": ([], ["compare", "progress", "row", "rows", "run", "runs"]),
    "qfarm.ops": (["local", "search", "sim"], ["farm", "process"]),
    "qfarm.ops.search": (["launch"], []),
    "qfarm.ops.local": (["launch"], []),
    "qfarm.ops.sim": (
        ["SIMULATOR_OWNER"],
        ["behaviour", "constraints", "cost", "engine", "faults", "grammar", "latency", "metrics",
         "prefix_cache", "protocol"]
    ),
    "qfarm": (["cli"], ["commands", "question_sets", "runtime"]),
    "qfarm.commands": (
        [],
        ["ask", "cache", "cancel", "compare", "doctor", "eval_retrieval", "export", "index", "local_model",
         "policy",
         "report", "search", "search_server", "serve", "sets", "sim", "status", "sweep", "verify",
         "view"],
    ),
}  # fmt: skip


def _module_name(path: Path) -> str:
    """``common/keys.py`` is ``qfarm.common.keys``: the name an installed qfarm gives it."""
    parts = path.relative_to(REPO).with_suffix("").parts
    name = ".".join(parts).removesuffix(".__init__")
    return f"qfarm.{name}" if parts[0] in FOLDERS else name


def _folder(package: str) -> Path:
    parts = package.split(".")
    if parts[0] == "qfarm" and len(parts) > 1 and parts[1] in FOLDERS:
        parts = parts[1:]
    return REPO.joinpath(*parts)


def _packages() -> list[str]:
    return sorted(
        _module_name(init).removesuffix(".__init__")
        for root in PRODUCT
        for init in (REPO / root).rglob("__init__.py")
    )


def _children(package: str) -> set[str]:
    """The package's modules and subpackages, ``_``-prefixed and ``__main__`` left out."""
    folder = _folder(package)
    names = {p.stem for p in folder.glob("*.py")} | {p.parent.name for p in folder.glob("*/__init__.py")}
    return {n for n in names if not n.startswith("_")}


def test_every_package_is_pinned() -> None:
    assert sorted(SURFACE) == _packages()


@pytest.mark.parametrize("package", sorted(SURFACE))
def test_exported_names(package: str) -> None:
    exported, _ = SURFACE[package]
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(exported)
    for name in exported:  # each resolves: a name of the package, or a submodule of it
        assert hasattr(module, name) or importlib.import_module(f"{package}.{name}")


@pytest.mark.parametrize("package", sorted(SURFACE))
def test_every_module_is_public_or_internal(package: str) -> None:
    """A new module is a decision: other packages may import it, or only its own."""
    exported, internal = SURFACE[package]
    public = set(exported) | _imported_from_outside(package)
    assert sorted(_children(package) - set(internal) - public) == [], "list them in SURFACE"
    assert sorted(set(internal) & set(exported)) == []


def _imported_from_outside(package: str) -> set[str]:
    """The modules of ``package`` another package imports (a front package's public
    modules: its ``__all__`` lists names, not modules)."""
    return {
        imported.removeprefix(package + ".").split(".")[0]
        for importer, imported in _imports()
        if imported.startswith(package + ".") and not _inside(importer, package)
    }


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _imports() -> list[tuple[str, str]]:
    """(importing module, imported module or module.name) for every product file."""
    pairs = []
    for root in PRODUCT:
        for path in sorted((REPO / root).rglob("*.py")):
            importer = _module_name(path)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.Import):
                    pairs += [(importer, a.name) for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    pairs.append((importer, node.module))
                    pairs += [(importer, f"{node.module}.{a.name}") for a in node.names]
    return pairs


def _owner_if_internal(imported: str) -> str | None:
    """The package whose internal module ``imported`` is in (None: a public one)."""
    for package, (_, internal) in SURFACE.items():
        if imported.startswith(package + "."):
            head = imported.removeprefix(package + ".").split(".")[0]
            if head in internal or head.startswith("_"):
                return package
    return None


def test_no_package_imports_another_ones_internal_modules() -> None:
    offenders = sorted(
        f"{importer} imports {imported}"
        for importer, imported in _imports()
        if (owner := _owner_if_internal(imported)) and not _inside(importer, owner)
    )
    assert offenders == []
