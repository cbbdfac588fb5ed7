"""The simulator, a feature of the product: a vLLM-compatible HTTP server that answers
from the prompt's evidence (`qfarm sim`; an eager sweep with no endpoint starts one).

What it imitates and why: docs/architecture.md, 'The simulator'.

Every answer, metric and log line it produces is labelled as simulated: the
``x-qfarm-simulator`` response header, ``owned_by: qfarm-simulator`` in
``/v1/models``, ``system_fingerprint: qfarm-simulator`` in completions.

* ``behaviour``: pure answer generation from the evidence, with failure rates.
* ``constraints``, ``grammar``: structured-output fields read and checked as vLLM does,
  and the GBNF grammars the answers must then match.
* ``latency``: time to first token + time per output token, with jitter.
* ``cost``, ``prefix_cache``, ``engine``: ``--latency cost``, what a continuous-batching
  server charges: prefill per uncached prompt token, decode steps batched across running
  sequences, a prefix cache of 16-token blocks hashed as vLLM's (docs/llm.md, 'The cost model').
* ``faults``: injected HTTP failures, at rates or on command.
* ``metrics``: Prometheus text with vLLM's metric names.
* ``server``: the aiohttp app; ``launch``: start it as a subprocess.
"""

SIMULATOR_OWNER = "qfarm-simulator"

__all__ = ["SIMULATOR_OWNER"]
