"""One module owns status.json: ``qfarm.producer.rundir`` reads and writes it as the typed
``StatusRecord`` (``qfarm.common.runstatus``); no other product module opens the file or
picks words out of its dict."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("common", "worker", "producer", "ops", "qfarm")
OWNER = Path("producer/rundir.py")


def product_modules() -> list[tuple[Path, ast.Module]]:
    out = []
    for folder in PRODUCT:
        for path in sorted((REPO / folder).rglob("*.py")):
            out.append((path.relative_to(REPO), ast.parse(path.read_text(encoding="utf-8"))))
    return out


def docstrings(tree: ast.Module) -> set[int]:
    """The ids of docstring nodes: a docstring may speak of status.json."""
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            out.add(id(body[0].value))
    return out


def test_no_module_reads_the_status_as_a_dict():
    found = []
    for path, tree in product_modules():
        if path.parts[0] not in ("common", "producer", "qfarm"):
            continue  # ops/ and worker/ read "status" from search servers' and HTTP answers
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "get" and node.args \
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value == "status":
                found.append(f"{path}:{node.lineno}")
    assert found == [], f'.get("status") on a dict; read StatusRecord.status instead: {found}'


def test_status_is_read_and_written_only_through_the_record():
    gone = ("update_run_status", "read_run_status")  # the dict reader and merger
    found = [f"{path}:{node.lineno} {node.id}" for path, tree in product_modules()
             for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id in gone]
    found += [f"{path}:{node.lineno} {node.attr}" for path, tree in product_modules()
              for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr in gone]
    assert found == []
    naming = []
    for path, tree in product_modules():
        skip = docstrings(tree)
        naming += [f"{path}:{node.lineno}" for node in ast.walk(tree)
                   if isinstance(node, ast.Constant) and node.value == "status.json"
                   and id(node) not in skip and path != OWNER]
    assert naming == [], f"status.json opened outside {OWNER}: {naming}"
