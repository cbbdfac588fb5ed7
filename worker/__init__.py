"""The I/O of a job: the stage chain, the in-process runner, retrieval backends, the LLM
gateway and the row store. Its modules import without Celery: the Celery app and its
tasks are ``qfarm.worker.celery``, which ``celery -A qfarm.worker`` finds by that name.
"""

if not __name__.startswith("qfarm."):  # imported by its folder's bare name from a checkout
    raise ImportError(
        f"import qfarm.{__name__}, not {__name__}: the folder installs under the qfarm name"
        " (celery -A qfarm.worker, python -m qfarm.ops.sim); a process importing both would"
        " hold two copies of every module"
    )

# Its public modules; the others (encoding, flow, leases, metrics, pipeline, stages) are its own.
__all__ = ["broker", "celery", "llm", "retrieval", "runner", "services", "store", "tracing"]
