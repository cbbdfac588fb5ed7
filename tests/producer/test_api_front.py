"""``qfarm.producer.api`` is the producer's front: the CLI and the HTTP app import only what it
exports, and never the private modules behind it."""

from __future__ import annotations

import ast
from pathlib import Path

import qfarm.producer.api

REPO = Path(__file__).resolve().parents[2]
CALLERS = ("qfarm", "producer/http")


def _imports_from_producer(path: Path) -> list[tuple[str, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("producer"):
            out += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names if a.name.startswith("producer")]
    return out


def test_every_exported_name_exists() -> None:
    assert producer.api.__all__
    missing = [name for name in producer.api.__all__ if not hasattr(producer.api, name)]
    assert missing == []


def test_the_cli_and_the_http_app_use_only_what_the_api_exports() -> None:
    offenders = []
    for caller in CALLERS:
        for path in sorted((REPO / caller).rglob("*.py")):
            for module, name in _imports_from_producer(path):
                where = f"{path.relative_to(REPO)}: {module} {name}".strip()
                if any(part.startswith("_") for part in module.split(".")):
                    offenders.append(where)
                elif module == "qfarm.producer.api" and name not in producer.api.__all__:
                    offenders.append(where)
    assert offenders == []
