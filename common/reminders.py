"""The quantifier reminder turn (SPEC §3, §4): placeholder until issue 4 lands.

Inserted right after the grounding reminder, only in guarded modes, only when
``quantifier_reminder_enabled``.
"""

from __future__ import annotations

from common.models import Mode, Preflight
from common.policy import Policy


def render_quantifier_reminder(mode: Mode, policy: Policy, preflight: Preflight | None) -> str | None:
    if not policy.quantifier_reminder_enabled or preflight is None:
        return None
    if not policy.quantifier_guard_enabled or mode.value not in policy.quantifier_guard_modes:
        return None
    cap = preflight.claim_cap
    cap_text = f" Give at most {cap} claims." if cap else ""
    return (
        "Reminder: answer only what the evidence supports; do not try to be exhaustive."
        f"{cap_text} Every claim must carry its [E#] pointer."
    )
