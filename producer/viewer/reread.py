"""A row read again: its passages fetched from the index by id, its answer verified again.

Rows keep counts and the verdict, not passage text or per-claim results. The
row page re-runs the deterministic verifier and the answerability sidecar
(pure functions of the answer, the evidence and the policy) on the kept answer
and the passages the row names (``evidence_passage_ids``), under the run
manifest's policy. That is only honest if it reproduces the row, so
``reread_row`` compares the recomputed verdict, label, counts, kinds and
sidecar outcome with the row's and lists every difference; the page then
says so and shows the row's own figures as the record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from qfarm.common.errors import QfarmError
from qfarm.common.grounding.names import TitleSet
from qfarm.common.grounding.preflight import run_preflight
from qfarm.common.grounding.sidecar import assess_answerability, demote_for_missed_evidence
from qfarm.common.grounding.verify import verify_answer
from qfarm.common.models import Answerability, Evidence, Manifest, Verification
from qfarm.common.policy import verifier_policy_hash
from qfarm.common.vocab import Mode


class PassageSource(Protocol):
    """Passages by id, read-only (``qfarm.worker.retrieval.embedded.EmbeddedRetriever``)."""

    def passages(self, chunk_ids: Sequence[str]) -> dict[str, Evidence]: ...

    def index_version(self) -> str: ...


@dataclass
class Reread:
    evidence: list[Evidence] = field(default_factory=list)  # E1..Ek with text; [] if unavailable
    verification: Verification | None = None  # None: not re-verified (see ``notes``)
    answerability: Answerability | None = None
    differences: list[str] = field(default_factory=list)  # row's figure vs recomputed
    notes: list[str] = field(default_factory=list)  # why something is not shown, version drift

    @property
    def reproduced(self) -> bool:
        return self.verification is not None and not self.differences


def _evidence(row: Mapping[str, Any], found: Mapping[str, Evidence]) -> list[Evidence]:
    ids, scores = list(row.get("evidence_ids") or []), list(row.get("top_scores") or [])
    out = []
    for n, (eid, pid) in enumerate(zip(ids, row.get("evidence_passage_ids") or [], strict=False)):
        score = scores[n] if n < len(scores) and isinstance(scores[n], int | float) else 0.0
        out.append(found[pid].model_copy(update={"id": eid, "score": float(score)}))
    return out


def _fired(answerability: Any) -> str:
    if isinstance(answerability, Mapping) and answerability.get("answerability_fired"):
        return f"fired ({answerability.get('answerability_confidence')})"
    return "did not fire"


def compare_with_row(
    row: Mapping[str, Any], ver: Verification, ans: Answerability | None
) -> list[str]:
    """Each figure of the row the recomputation does not reproduce, as "name: row X, now Y"."""
    now_ans = {"answerability_fired": True, "answerability_confidence": ans.confidence_class} if ans else None
    pairs = [
        ("verdict", row.get("verdict"), ver.verdict.value),
        ("label", row.get("label"), ver.label.value),
        ("claims", row.get("n_claims"), ver.n_claims),
        ("verified claims", row.get("n_verified"), ver.n_verified),
        ("violation kinds", sorted(set(row.get("violation_kinds") or [])),
         sorted({k.value for k in ver.violation_kinds})),
        ("answerability sidecar", _fired(row.get("answerability")), _fired(now_ans)),
    ]
    return [f"{name}: row {a}, recomputed {b}" for name, a, b in pairs if a != b]


def reread_row(
    row: Mapping[str, Any], manifest: Manifest, source: PassageSource | None, where: str
) -> Reread:
    """Passages and, with a kept answer, the verification of ``row``; ``where`` names the index."""
    out = Reread()
    pids = list(row.get("evidence_passage_ids") or [])
    if not row.get("evidence_ids"):
        return out
    if not pids:
        out.notes.append("This row does not record its passages' ids (written before rows had "
                         "evidence_passage_ids), so the passages' text cannot be shown.")
        return out
    if source is None:
        out.notes.append(f"No embedded index at {where}: the passages' text cannot be shown.")
        return out
    try:
        found, version = source.passages(pids), source.index_version()
    except QfarmError as exc:
        out.notes.append(f"The index at {where} cannot be read ({exc}).")
        return out
    missing = [p for p in pids if p not in found]
    if missing:
        out.notes.append(f"The index at {where} lacks {len(missing)} of this row's "
                         f"{len(pids)} passages ({', '.join(missing[:3])}…): it is not the "
                         "index the run used, so nothing is re-verified.")
        return out
    out.evidence = _evidence(row, found)
    if row.get("index_version") and row["index_version"] != version:
        out.notes.append(f"The run retrieved from index version {row['index_version']}; the "
                         f"index at {where} is {version}: passage text may differ.")
    if row.get("verifier_policy_hash") not in (None, verifier_policy_hash(manifest.policy)):
        out.notes.append("The row's verifier policy hash differs from its manifest's policy.")
    answer = row.get("answer")
    if answer is None or not row.get("verdict"):
        return out
    # The cap profile the worker's preflight used: every graded row names it.
    profile = row.get("model_profile_key")
    if not profile:
        out.notes.append("This row has no model_profile_key (the cap profile its preflight "
                         "used): it is not a row this qfarm wrote, so nothing is re-verified.")
        return out
    mode = Mode(str(row.get("mode")))
    question = str(row.get("question") or "")
    # the worker's preflight read the index's titles as names; so does the re-read
    title_set = getattr(source, "title_set", None)
    titles = title_set() if callable(title_set) else None
    pre = run_preflight(question, mode, manifest.policy, str(profile),
                        titles if isinstance(titles, TitleSet) else None)
    out.verification = verify_answer(
        str(answer), question=question, mode=mode, evidence=out.evidence,
        policy=manifest.policy, preflight=pre,
    )
    out.answerability = assess_answerability(
        question, str(answer), out.evidence, manifest.policy, pre.quantifier
    )
    out.verification = demote_for_missed_evidence(out.verification, out.answerability,
                                                  manifest.policy)
    out.differences = compare_with_row(row, out.verification, out.answerability)
    return out
