"""The LLM gateway: batched, balanced, fault-tolerant generation over vLLM endpoints.

``open_gateway(settings)`` once per process; ``Gateway.generate(prompt,
sampling, job_id=...)`` from any thread (or ``submit_many`` for futures); the
requests themselves run on one event loop (``transport.py``). See ``gateway.py`` for the retry
rules, ``balancer.py`` for endpoint choice, health and the circuit breaker,
``batcher.py`` for the optional micro-batcher and ``docs/llm.md`` for
pointing the farm at real vLLM servers.
"""

from qfarm.worker.llm.gateway import Gateway, open_gateway

__all__ = ["Gateway", "open_gateway"]
