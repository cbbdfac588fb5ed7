"""Runs: a sweep planned, enqueued, run, followed, retried and cancelled.

``launch`` checks a sweep's input and starts it; ``eager`` runs it in this process and
``distributed`` publishes it to Redis for the workers; ``follow`` follows a run to its end
(through the one ``sweep.Follower``, with its recovery and hand-over) for every way a run
lives: eager, distributed, ``--resume``, ``--attach``, ``--retry-errors`` (``retry``);
``ask`` asks one question through the queue or in this process; ``outcome`` judges how a
run ended; ``control`` cancels one and describes it. ``types`` holds the API's shapes
(``SweepSpec``, ``RunResult``...), ``services`` opens what a run talks to.
"""

# The public submodules (tests/test_public_surface.py pins them).
__all__ = [
    "ask", "consumers", "control", "eager", "endpoints", "follow", "launch",
    "outcome", "retry", "services", "types",
]  # fmt: skip
