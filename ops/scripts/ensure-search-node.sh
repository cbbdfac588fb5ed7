#!/usr/bin/env bash
# Build the OpenSearch node's launcher (ops/search/node) once: Java 17+ and Maven from
# Debian's packages when missing (as root, as ensure-redis.sh does for Redis), then
# Maven compiles the launcher and resolves the server's jars from Maven Central into its
# local repository. A no-op when an up-to-date build exists (qfarm.ops.search.launch).
set -euo pipefail
cd "$(dirname "$0")/../.."
need=()
command -v java >/dev/null || need+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || need+=(maven)
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "the search node needs Java 17+ and Maven: install ${need[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need[@]}"
fi
"${PYTHON:-.venv/bin/python}" -c 'from qfarm.ops.search.launch import build_search_node, build_dir; build_search_node(); print(f"search node: built in {build_dir()}")'
