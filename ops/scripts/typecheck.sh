#!/usr/bin/env bash
# Type-checks the product under the name it installs as. mypy names a file by its folders
# (common/keys.py would be `common.keys`), while the code imports `qfarm.common.keys`
# (setup.py maps the top-level folders under `qfarm`), so mypy reads a view of the
# checkout laid out as installed: .typecheck/qfarm/ holds links to qfarm/'s files and to
# common/, worker/, producer/ and ops/. Rebuilt on every run; git ignores it.
set -euo pipefail
cd "$(dirname "$0")/../.."
MYPY="${MYPY:-.venv/bin/mypy}"
view=.typecheck/qfarm
rm -rf .typecheck
mkdir -p "$view"
for entry in qfarm/*; do
  case "$(basename "$entry")" in __pycache__) continue ;; esac
  ln -s "../../$entry" "$view/$(basename "$entry")"
done
for folder in common worker producer ops; do
  ln -s "../../$folder" "$view/$folder"
done
exec "$MYPY" "$@"
