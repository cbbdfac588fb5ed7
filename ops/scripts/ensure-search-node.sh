#!/usr/bin/env bash
# Build the search nodes' launchers once (qfarm.ops.search.launch): OpenSearch
# (ops/search/node), Elasticsearch 8.19 on the default JDK and Elasticsearch 9 on a Java 21+
# JDK where the machine has one (ops/search/es-node). Java 17+ and Maven come from Debian's
# packages when missing (as root, as ensure-redis.sh does for Redis); Maven compiles each
# launcher and resolves the servers' jars from Maven Central into its local repository.
# A no-op when up-to-date builds exist.
set -euo pipefail
cd "$(dirname "$0")/../.."
need=()
command -v java >/dev/null || need+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || need+=(maven)
if [ "${#need[@]}" -gt 0 ]; then
  bash "$(dirname "$0")/apt-install.sh" "${need[@]}"
fi
"${PYTHON:-.venv/bin/python}" - <<'PY'
from qfarm.ops.search.launch import build_search_node, find_jdk

builds = [build_search_node("opensearch"), build_search_node("elasticsearch")]
jdk21 = find_jdk(21)
if jdk21 is not None:
    builds.append(build_search_node("elasticsearch", java_home=jdk21))
for b in builds:
    print(f"search node: {b.engine.name} launcher on {b.java}")
PY
