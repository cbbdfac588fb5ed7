"""The LLM gateway: batched, balanced, fault-tolerant generation over vLLM endpoints.

``open_gateway(settings)`` once per process; ``Gateway.generate(prompt,
sampling, job_id=...)`` from any thread (or ``submit_many`` for futures); the
requests themselves run on one event loop (``transport.py``). See ``gateway.py`` for the retry
rules, ``balancer.py`` for endpoint choice, health and the circuit breaker,
``batcher.py`` for the optional micro-batcher and ``docs/llm.md`` for
pointing the farm at real vLLM servers.

``response_cache.py`` keeps model replies of runs with ``--cache``: pass a store
(``RedisResponseCache``, or ``process_response_cache()`` in process) to ``open_gateway``.
"""

from qfarm.worker.llm.gateway import Gateway, open_gateway
from qfarm.worker.llm.response_cache import (
    MemoryResponseCache,
    RedisResponseCache,
    ResponseStore,
    process_response_cache,
)

__all__ = [
    "Gateway",
    "MemoryResponseCache",
    "RedisResponseCache",
    "ResponseStore",
    "open_gateway",
    "process_response_cache",
]
