"""Run ids and run directories: ``<results>/<run_id>/{manifest.json,rows.jsonl,summary.md}``."""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path

from common.models import Manifest


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def create_run_dir(results_dir: Path, manifest: Manifest) -> Path:
    """Create the run directory with its manifest; called only after all input is valid."""
    run_dir = results_dir / manifest.run_id
    run_dir.mkdir(parents=True, exist_ok=False)
    write_json_atomic(run_dir / "manifest.json", manifest.model_dump(mode="json"))
    return run_dir


def read_manifest(run_dir: Path) -> Manifest:
    return Manifest.model_validate_json((run_dir / "manifest.json").read_text())


def update_run_status(run_dir: Path, **fields: object) -> None:
    """Status lives beside the manifest (the manifest itself never changes)."""
    path = run_dir / "status.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(fields)
    write_json_atomic(path, data)


def read_run_status(run_dir: Path) -> dict:
    path = run_dir / "status.json"
    return json.loads(path.read_text()) if path.exists() else {}
