"""The product's packages never import bench/ (question sets, results, benchmarks only)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("common", "worker", "producer", "ops", "qfarm")


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_product_does_not_import_bench() -> None:
    offenders = [
        f"{path.relative_to(REPO)}: {name}"
        for package in PRODUCT
        for path in sorted((REPO / package).rglob("*.py"))
        for name in _imports(path)
        if name == "bench" or name.startswith("bench.")
    ]
    assert offenders == []
