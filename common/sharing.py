"""Which requests of a bundle share one model call: the samples of one question x mode.

With the policy's ``share_samples`` on, sample i of (question, mode) carries the seed
``base + i`` (``qfarm.common.jobs.seed_for``). Requests whose prompt and sampling are equal
but for the seed, and whose seeds are consecutive, become one request with the lowest seed
and ``n`` = their count; choice j answers the request whose seed is the lowest + j. That is
vLLM's own rule for the choices of one request (its parallel sampling seeds choice j with
seed + j), so a sample's answer is the same alone or in any group: a rerun, a resume or a
redelivered bundle that regroups what is left gets the same rows
(docs/llm.md, 'Shared samples').

Never shared: requests without ``share_samples``, greedy ones (vLLM refuses ``n`` > 1 at
temperature 0, and greedy samples do not differ), and requests that already ask ``n`` > 1.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from qfarm.common.models import Sampling

# The most choices one shared request asks for; a longer run of samples is cut into runs
# of at most this many (each its own request, with its own first seed).
MAX_SHARED_N = 64


def is_shareable(sampling: Sampling) -> bool:
    return sampling.share_samples and sampling.temperature > 0 and sampling.n == 1


def _share_key(prompt: str, sampling: Sampling) -> str:
    data = sampling.model_dump(mode="json")
    data.pop("seed")
    return json.dumps([prompt, data], sort_keys=True)


def share_groups(
    items: Sequence[tuple[str, Sampling, str]], max_n: int = MAX_SHARED_N
) -> list[list[int]]:
    """``items`` (prompt, sampling, job id) as groups of indices, each one request: a group
    is in seed order (its first is the request's seed, position j its choice j). Every
    index is in exactly one group; groups come in the order of their first item."""
    runs: dict[str, list[int]] = {}
    groups: list[list[int]] = []
    for i, (prompt, sampling, _) in enumerate(items):
        if is_shareable(sampling):
            runs.setdefault(_share_key(prompt, sampling), []).append(i)
        else:
            groups.append([i])
    for members in runs.values():
        members.sort(key=lambda i: items[i][1].seed)
        group: list[int] = []
        for i in members:
            if group and (
                items[i][1].seed != items[group[-1]][1].seed + 1 or len(group) >= max_n
            ):
                groups.append(group)
                group = []
            group.append(i)
        groups.append(group)
    return sorted(groups, key=lambda g: min(g))
