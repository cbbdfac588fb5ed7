"""The product's vocabulary: every mode, rung, verdict, label and kind, defined once.

Each is a ``StrEnum``, so a member *is* its string: it serializes as itself in
rows, manifests and JSON, compares equal to the plain string read back from
``rows.jsonl``, and formats as its value in reports. Every other module imports
these names (``qfarm.common.models`` re-exports them for the records that carry
them); nothing else spells a member's value. The rules behind each word are in
docs/grounding.md.

Nothing here imports anything of ours, so ``qfarm.common.policy`` (which
``qfarm.common.models`` depends on) can use the vocabulary too.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


class Mode(StrEnum):
    """How the model is asked to ground its answer (docs/grounding.md, 'Jobs and modes')."""

    QUOTE = "quote"
    CLAIM_LATTICE_POINTER = "claim_lattice_pointer"
    CLAIM_LATTICE = "claim_lattice"


ALL_MODES: tuple[Mode, ...] = tuple(Mode)
# The modes whose answers are lists of claims with evidence pointers.
LATTICE_MODES: frozenset[Mode] = frozenset({Mode.CLAIM_LATTICE_POINTER, Mode.CLAIM_LATTICE})


class Intensity(StrEnum):
    """A question's quantifier rung, narrowest to broadest.

    The rungs: docs/grounding.md, 'Quantifier classifier'.
    """

    ABSENT = "ABSENT"
    SINGULAR = "SINGULAR"
    PROPORTIONAL = "PROPORTIONAL"
    SMALL_NUM_EXPLICIT = "SMALL_NUM_EXPLICIT"
    COMPARATIVE_BOUND = "COMPARATIVE_BOUND"
    FEW = "FEW"
    MANY = "MANY"
    ALL = "ALL"
    COMPREHENSIVE = "COMPREHENSIVE"
    OPEN_REQUEST = "OPEN_REQUEST"


ALL_INTENSITIES: tuple[Intensity, ...] = tuple(Intensity)
# Rungs that ask for a whole set rather than a bounded number of items.
BROAD_INTENSITIES: frozenset[Intensity] = frozenset(
    {Intensity.MANY, Intensity.ALL, Intensity.COMPREHENSIVE, Intensity.OPEN_REQUEST}
)
# Rungs whose cap is the question's own number.
COUNTED_INTENSITIES: frozenset[Intensity] = frozenset(
    {Intensity.SMALL_NUM_EXPLICIT, Intensity.COMPARATIVE_BOUND}
)


class Verdict(StrEnum):
    """How an answer's claims held up as a whole (docs/grounding.md, 'Verdict and label')."""

    STRICT = "STRICT"
    HYBRID = "HYBRID"
    UNGROUNDED = "UNGROUNDED"


class Label(StrEnum):
    """Audit label ladder, high to low, plus the broad-question and exploratory labels."""

    EVIDENCE_WARRANTED = "EVIDENCE-WARRANTED"
    ANCHOR_WARRANTED = "ANCHOR-WARRANTED"
    POINTER_LINKED = "POINTER-LINKED"
    UNGROUNDED = "UNGROUNDED"
    BROAD_CAPPED = "BROAD-CAPPED"
    BROAD_REJECTED = "BROAD-REJECTED"
    EXPLORATORY = "EXPLORATORY"
    # the answerability sidecar's opt-in demotion: the answer denied what the evidence holds
    EVIDENCE_MISSED_PARTIAL = "EVIDENCE-MISSED-PARTIAL"


class ViolationKind(StrEnum):
    """What went wrong with an answer or one of its claims.

    Each kind's trigger and effect: docs/grounding.md, 'Violation kinds'.
    """

    NO_EVIDENCE_POINTER = "NO_EVIDENCE_POINTER"
    FORMAT_COLLAPSED = "FORMAT_COLLAPSED"
    SCHEMA_INVALID = "SCHEMA_INVALID"
    CITATION_MISMATCH = "CITATION_MISMATCH"
    TITLE_MISMATCH = "TITLE_MISMATCH"
    TOO_MANY_CLAIMS = "TOO_MANY_CLAIMS"
    TOO_MANY_EVIDENCE_IDS = "TOO_MANY_EVIDENCE_IDS"
    POINTER_OVERFLOW_TRIMMED = "POINTER_OVERFLOW_TRIMMED"
    WARRANT_MISSING = "WARRANT_MISSING"
    LAZY_ANCHOR_DEMOTE = "LAZY_ANCHOR_DEMOTE"
    DEFLECTION_DETECTED = "DEFLECTION_DETECTED"
    BROAD_QUANTIFIER_RUNAWAY = "BROAD_QUANTIFIER_RUNAWAY"
    BROAD_QUANTIFIER_CAP_APPLIED = "BROAD_QUANTIFIER_CAP_APPLIED"
    BROAD_QUANTIFIER_SCOPE_UNBOUND = "BROAD_QUANTIFIER_SCOPE_UNBOUND"
    BROAD_QUANTIFIER_REJECTED = "BROAD_QUANTIFIER_REJECTED"


class BreakerState(StrEnum):
    """An LLM endpoint's circuit breaker (worker/llm/balancer.py): closed lets requests
    through, open keeps them off for a cool-down, half_open lets one trial through."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


# The response header the simulator (ops/sim) sets on every reply, so the client and the
# endpoint probe can label its output as simulated.
SIMULATOR_HEADER = "x-qfarm-simulator"


class Confidence(StrEnum):
    """The answerability sidecar's confidence, weakest first.

    The classes: docs/grounding.md, 'Answerability sidecar'.
    """

    WEAK = "weak"
    MEDIUM = "medium"
    STRONG = "strong"


class RunStatus(StrEnum):
    """A run's state, as ``status.json`` records it and as readers show it.

    ``qfarm.common.runstatus`` derives the word to show from the record, the rows and the
    producer's process; the CLI's exit codes and messages follow it (docs/reports.md,
    'Run status').
    """

    ENQUEUEING = "enqueueing"
    RUNNING = "running"
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"
    FAILED = "failed"
    # The producer died before every job was sent: nothing will send the rest.
    ENQUEUE_INTERRUPTED = "enqueue interrupted"
    # A follower that lost Redis: the run goes on in its workers, unwatched.
    DETACHED = "detached: Redis unreachable"
    # A follower that stopped because no worker consumed some of the run's queues: its
    # jobs wait there for one.
    NO_WORKER = "stopped: no worker"
    # A run the viewer lists from Redis whose manifest has expired.
    LOST = "lost"


class ExitCode(IntEnum):
    """What the ``qfarm`` command (and a worker that refuses its settings) exits with, so a CI
    job can gate on it (README, 'Exit codes'). Defined beside the run statuses because
    ``qfarm.common.errors`` gives each error class its code, and every entry point shares them.
    """

    OK = 0  # the command did what was asked; a sweep: complete, errored rows within the limit
    FAILED = 1  # a run incomplete, interrupted, cancelled or failed; a service failed
    USAGE = 2  # bad input, flags or settings: nothing was started
    ROW_ERRORS = 3  # the run completed, but more of its rows errored than --max-error-rate allows
    WORSE = 4  # `qfarm compare --fail-on-worse`: B is worse than A beyond noise
    INTERRUPTED = 130  # Ctrl-C or SIGTERM (128 + SIGINT, the shell's convention)
    BROKEN_PIPE = 141  # the reader of stdout went away (128 + SIGPIPE)


# States in which a producer is still at work (its process may have died since).
LIVE_RUN_STATUSES: frozenset[RunStatus] = frozenset({RunStatus.RUNNING, RunStatus.ENQUEUEING})


class ErrorKind(StrEnum):
    """Where a failed job's error came from; a row's ``error`` starts with it.

    ``internal`` is a bug or an unusable cache entry or record, ``retrieval`` the search
    backend, ``llm`` the model endpoint (after its retries). Reports group error rows by it.
    ``cancelled`` marks a job its run's cancel stopped inside a bundle a worker had
    taken: it never becomes a row, the run's count of cancelled jobs holds it.
    """

    INTERNAL = "internal"
    RETRIEVAL = "retrieval"
    LLM = "llm"
    CANCELLED = "cancelled"


def error_text(kind: ErrorKind, detail: str) -> str:
    """A row's ``error``: its kind, then what happened."""
    return f"{kind}: {detail}"


class Backend(StrEnum):
    """A retrieval backend (docs/retrieval.md): the embedded SQLite index or a search cluster."""

    EMBEDDED = "embedded"
    ELASTICSEARCH = "elasticsearch"
    OPENSEARCH = "opensearch"


class CacheKind(StrEnum):
    """Which cache ``qfarm cache`` reads: whole rows of earlier runs (``result``, on by
    default, ``--burn`` skips it) or model replies (``response``, ``--cache`` turns it on)."""

    RESULT = "result"
    RESPONSE = "response"


class SpanName(StrEnum):
    """A trace's spans that are not a stage (a stage's span is named as its stage):
    docs/reports.md, 'Exports'."""

    RUN = "qfarm.run"
    JOB = "qfarm.job"


class Role(StrEnum):
    """A farm process's role: one line of the Procfile, one supervised program.

    The worker roles consume queues (cpu: retrieve and verify; gpu: generate;
    interactive: single questions); ``mixed`` labels a worker that consumes the queues of
    more than one of them.
    """

    SIMULATOR = "simulator"
    CPU = "cpu"
    GPU = "gpu"
    INTERACTIVE = "interactive"
    API = "api"
    FLOWER = "flower"
    MIXED = "mixed"


# The roles a farm runs, in the Procfile's order (``mixed`` is no process of its own).
FARM_ROLES: tuple[Role, ...] = tuple(r for r in Role if r is not Role.MIXED)
# The roles that are Celery workers.
WORKER_ROLES: tuple[Role, ...] = (Role.CPU, Role.GPU, Role.INTERACTIVE)
