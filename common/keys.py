"""Redis key layout and the row-write script, shared by workers and producers.

Everything for a run lives under ``qfarm:run:<run_id>:``:

* ``manifest``  the run's Manifest (JSON), written before any job is enqueued
* ``rows``      hash job_id -> row JSON; HSETNX makes a row write-once, so a
                redelivered or duplicated task can never produce a second row
                (a retry's higher attempt may replace an error row: WRITE_ROW_LUA).
                Its keys are the run's set of done job ids (HLEN = progress).
* ``log``       list of job ids in the order their rows landed (a replaced row's id
                again when its replacement lands); the aggregator
                streams rows.jsonl from it with a cursor, so memory stays flat.
* ``failed``    count of rows that carry an error
* ``stage:<s>`` count of jobs that entered stage s (per-stage rates)
* ``restored``  count of rows written back from rows.jsonl after Redis lost them
* ``follower``  lease of the process draining the run's rows into its files
* ``error``     a run-level error (e.g. a manifest workers cannot read); followers stop on it
* ``cancelled`` present once the run is cancelled (the first cancel's time); tasks
                check it before each stage, and the generate stage while its bundle's
                requests are out
* ``cancelled_jobs`` set of the job ids a cancel stopped before they had a row
                (purged from a queue, skipped at a stage's entry, or stopped inside a
                taken bundle): rows + this set's size = the planned jobs
* ``cancels``   hash of cumulative cancel counts (``cancels``, ``purged_messages``)
* ``detail:<job_id>`` the full job record of a single query (claims, sidecar), for ``qfarm ask``

``qfarm:runs`` is a sorted set of run ids by creation time; ``qfarm:cache:<digest>``
holds cached results across runs, ``qfarm:response:<digest>`` cached model replies
(the response cache, ``--cache``: docs/llm.md, 'Response cache').

Operator metrics (run-independent, read by ``qfarm serve``'s /metrics; fields are
spelled in common/metrics.py):

* ``qfarm:metrics:counters`` hash of counters every process adds to (HINCRBY):
  rows by mode and verdict, LLM requests, errors and latency buckets per endpoint,
  result-cache hits and misses, jobs enqueued by mode
* ``qfarm:worker:<name>`` one hash per worker process (role, node, queues, and
  gauges: in-flight requests, breaker state and health per endpoint), expiring unless
  refreshed: a heartbeat
* ``qfarm:workers`` sorted set of worker process names by last heartbeat, so readers
  find the live ones without scanning the keyspace
"""


from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

PREFIX = "qfarm"
RUNS_KEY = f"{PREFIX}:runs"
ROW_TTL_S = 30 * 24 * 3600
CACHE_TTL_S = 30 * 24 * 3600

# kombu's Redis transport keeps each delivered, not yet acknowledged message here:
# delivery tag -> JSON [message, exchange, routing key].
UNACKED_KEY = "unacked"
# kombu scores each unacknowledged message there by when it was delivered (or renewed).
UNACKED_INDEX_KEY = "unacked_index"


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: the queue its messages wait in (a Redis list of that name),
    the Celery task that consumes them, and the per-run counter of jobs that entered it."""

    name: str
    task: str

    @property
    def queue(self) -> str:
        return self.name

    def counter_key(self, run_id: str) -> str:
        return _run_key(run_id, f"stage:{self.name}")


RETRIEVE = Stage("retrieve", "qfarm.retrieve")
GENERATE = Stage("generate", "qfarm.generate")
VERIFY = Stage("verify", "qfarm.verify")
# All stages of one job in one task, so a single query never waits behind a sweep.
INTERACTIVE = Stage("interactive", "qfarm.run_job")

# A sweep's jobs pass these in order; worker/stages.py gives each its step.
SWEEP_STAGES = (RETRIEVE, GENERATE, VERIFY)
STAGES = (INTERACTIVE, *SWEEP_STAGES)
QUEUES = tuple(stage.queue for stage in STAGES)


_RUN_PREFIX = f"{PREFIX}:run:"


def _run_key(run_id: str, part: str) -> str:
    return f"{_RUN_PREFIX}{run_id}:{part}"


def manifest_key(run_id: str) -> str:
    return _run_key(run_id, "manifest")


def rows_key(run_id: str) -> str:
    return _run_key(run_id, "rows")


def log_key(run_id: str) -> str:
    return _run_key(run_id, "log")


def failed_key(run_id: str) -> str:
    return _run_key(run_id, "failed")


def restored_key(run_id: str) -> str:
    return _run_key(run_id, "restored")


def follower_key(run_id: str) -> str:
    return _run_key(run_id, "follower")


def error_key(run_id: str) -> str:
    return _run_key(run_id, "error")


def cancelled_key(run_id: str) -> str:
    return _run_key(run_id, "cancelled")


def cancelled_jobs_key(run_id: str) -> str:
    return _run_key(run_id, "cancelled_jobs")


def cancels_key(run_id: str) -> str:
    return _run_key(run_id, "cancels")


def detail_key(run_id: str, job_id: str) -> str:
    return _run_key(run_id, f"detail:{job_id}")


def run_pattern(part: str) -> str:
    """A SCAN/KEYS pattern matching ``part`` of every run (e.g. "rows")."""
    return _run_key("*", part)


def run_id_of(key: str, part: str) -> str | None:
    """The run id in a key that ``run_pattern(part)`` matched, None for any other key."""
    head, tail = _RUN_PREFIX, f":{part}"
    if key.startswith(head) and key.endswith(tail) and len(key) > len(head) + len(tail):
        return key[len(head) : -len(tail)]
    return None


METRICS_COUNTERS_KEY = f"{PREFIX}:metrics:counters"
WORKER_PREFIX = f"{PREFIX}:worker:"
WORKERS_KEY = f"{PREFIX}:workers"


def worker_key(name: str) -> str:
    """Heartbeat and gauges of one worker process (``host:pid``)."""
    return f"{WORKER_PREFIX}{name}"


CACHE_PREFIX = f"{PREFIX}:cache:"
# SCAN pattern of every result-cache entry (``qfarm cache``); digests are hex, never a glob.
CACHE_PATTERN = f"{CACHE_PREFIX}*"


def cache_key(digest: str) -> str:
    return f"{CACHE_PREFIX}{digest}"


def result_cache_digest(
    *,
    question: str,
    mode: str,
    sample_index: int,
    governance_hash: str,
    model: str,
    index_version: str | None,
    retriever_config: dict,
) -> str:
    """Content key of a cached result: everything that could change the row's verdict."""
    payload = {
        "q": " ".join(question.casefold().split()),
        "mode": mode,
        "i": sample_index,
        "gov": governance_hash,
        "model": model,
        "index": index_version,
        "retriever": retriever_config,
    }
    raw = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


RESPONSE_CACHE_PREFIX = f"{PREFIX}:response:"
# SCAN pattern of every response-cache entry; a prefix of its own, so the result cache's
# pattern never reads a model reply as a row (or the other way round).
RESPONSE_CACHE_PATTERN = f"{RESPONSE_CACHE_PREFIX}*"
RESPONSE_CACHE_TTL_S = CACHE_TTL_S

# Request fields that change how a reply travels or is scheduled, never its text: left out
# of the response cache's key. Every other field of the body is in it, so a parameter added
# to the request later is keyed without anyone remembering to add it.
RESPONSE_KEY_TRANSPORT_FIELDS = frozenset({"stream", "stream_options", "priority"})


def response_cache_key(digest: str) -> str:
    return f"{RESPONSE_CACHE_PREFIX}{digest}"


def response_cache_digest(identity: dict, body: dict) -> str:
    """Content key of a cached model reply: the served model as its endpoint described
    itself (``identity``) and the request body as sent, less its transport-only fields."""
    payload = {
        "served": identity,
        "body": {k: v for k, v in body.items() if k not in RESPONSE_KEY_TRANSPORT_FIELDS},
    }
    raw = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


# KEYS: rows hash, log list, failed counter, verify-stage counter.
# ARGV: job_id, row JSON, "1" if the row has an error, ttl, the row's attempt (0: first).
# A row is write-once, with one exception that keeps one row per job under ``--retry-errors``:
# an attempt N > 0 replaces the job's row only while that row is an error row of an earlier
# attempt (fewer than N ``retried_errors``). A redelivered or duplicated attempt finds the
# row already replaced (a success, or an error of the same attempt) and writes nothing.
# Returns 1: written, 2: replaced an error row, 0: nothing written.
WRITE_ROW_LUA = """
redis.call('INCR', KEYS[4])
local ttl = tonumber(ARGV[4])
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('RPUSH', KEYS[2], ARGV[1])
  if ARGV[3] == '1' then redis.call('INCR', KEYS[3]) end
  if ttl and ttl > 0 then
    redis.call('EXPIRE', KEYS[1], ttl)
    redis.call('EXPIRE', KEYS[2], ttl)
  end
  return 1
end
local attempt = tonumber(ARGV[5]) or 0
if attempt <= 0 then return 0 end
local ok, old = pcall(cjson.decode, redis.call('HGET', KEYS[1], ARGV[1]))
if not ok or type(old) ~= 'table' then return 0 end
local err = old['error']
if err == nil or err == cjson.null or err == '' then return 0 end
local before = old['retried_errors']
local n = 0
if type(before) == 'table' then n = #before end
if n >= attempt then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('RPUSH', KEYS[2], ARGV[1])
if ARGV[3] ~= '1' then redis.call('DECR', KEYS[3]) end
return 2
"""


def write_row_call(run_id: str, job_id: str, row_json: str | bytes, *, failed: bool,
                   counter_key: str, attempt: int = 0) -> dict[str, list]:
    """``WRITE_ROW_LUA``'s keys and args for one row (``script(**call)``); ``counter_key``
    counts every attempt: the verify stage's for a worker, the restored rows' for a
    producer putting rows back. ``attempt``: the row's ``len(retried_errors)``."""
    return {
        "keys": [rows_key(run_id), log_key(run_id), failed_key(run_id), counter_key],
        "args": [job_id, row_json, "1" if failed else "0", ROW_TTL_S, attempt],
    }
