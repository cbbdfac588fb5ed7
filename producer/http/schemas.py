"""Request and response bodies of the HTTP API (they are also its OpenAPI schema).

Shapes are checked by pydantic; meanings (a mode, a policy key, the size of a plan)
by the same functions the CLI uses, so both refuse the same input with the same words.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from qfarm.common.models import Mode
from qfarm.common.reporting.audit import render_audit_line
from qfarm.producer.api import Answer

MAX_N = 1000  # samples per question and mode; QFARM_API_MAX_JOBS bounds the whole plan


class _Body(BaseModel):
    # An unknown field is an error that names it, not silently ignored (a typo like
    # "keep_answer" would otherwise drop answers without a word); a value of the wrong JSON
    # type is an error too ("n": "2", "burn": "yes"), not quietly converted.
    model_config = ConfigDict(extra="forbid", strict=True)


class AskRequest(_Body):
    question: str = Field(description="the question; at most QFARM_MAX_QUESTION_CHARS characters")
    mode: str = Field(default=Mode.CLAIM_LATTICE_POINTER.value,
                      description="one of " + ", ".join(m.value for m in Mode))
    policy: dict[str, Any] = Field(default_factory=dict,
                                   description="policy overrides by key (`qfarm policy` lists them)")
    burn: bool = Field(default=False, description="bypass the result cache")
    wait_s: float = Field(default=30.0, ge=0,
                          description="seconds to wait for the answer before a 202 with a job URL")


SET_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class SweepRequest(_Body):
    questions: list[str] = Field(description="question texts (or POST a JSONL body instead)")
    name: str = Field(default="request", pattern=SET_NAME,
                      description="the question set's name, shown in run lists (letters, "
                                  "digits, . _ -; at most 64)")
    modes: list[str] = Field(default_factory=lambda: [m.value for m in Mode])
    n: int = Field(default=1, ge=1, le=MAX_N, description="samples per question and mode")
    policy: dict[str, Any] = Field(default_factory=dict)
    keep_answers: bool = False
    burn: bool = False
    cache: bool = Field(default=False, description="the response cache answers model requests "
                                                   "asked before (`qfarm sweep --cache`)")


class Problem(BaseModel):
    """Every error: the HTTP status, the field at fault (if any) and a one-line message."""

    status: int
    field: str | None = None
    message: str


class ErrorBody(BaseModel):
    error: Problem


def answer_payload(answer: Answer) -> dict[str, Any]:
    """What POST /v1/ask and GET /v1/jobs/{id} return: the row, the audit line (as
    ``qfarm ask`` prints it), the answer when kept, and the evidence map."""
    row, record = answer.row, answer.record
    evidence = []
    if record is not None and record.retrieval is not None:
        evidence = [
            {"id": e.id, "doc_id": e.doc_id, "title": e.title, "score": e.score, "text": e.text}
            for e in record.retrieval.evidence
        ]
    if record is not None:
        audit = render_audit_line(record)
    elif row.grading is not None:  # a cache hit: the verdict came from an earlier run
        g = row.grading
        audit = f"{g.label.value} · via {row.mode.value} · cached  {g.n_verified}/{g.n_claims}"
    else:
        audit = f"ERROR · via {row.mode.value} · {row.error}"
    claims = (
        [c.model_dump(mode="json") for c in record.verification.claims]
        if record is not None and record.verification is not None else []
    )
    return {
        "state": "done",
        "row": row.model_dump(mode="json"),
        "audit": audit,
        "answer": row.answer,
        "evidence": evidence,
        "claims": claims,
    }
