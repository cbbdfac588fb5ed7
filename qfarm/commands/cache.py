"""`qfarm cache stats|prune`: the two caches in Redis, their figures and removing entries:
the result cache (whole rows; docs/distributed.md, 'Result cache') and the response cache
(model replies of runs with --cache; docs/llm.md, 'Response cache')."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING

from qfarm import runtime
from qfarm.common.errors import InputError
from qfarm.common.settings import load_settings
from qfarm.common.vocab import CacheKind

if TYPE_CHECKING:
    from qfarm.common.cache import CacheStats

DAY_S = 24 * 3600


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cache", help="the result and response caches in Redis: their figures, or remove entries",
        description="The caches runs share in Redis: the result cache (whole rows of earlier "
                    "runs; --burn skips it) and the response cache (model replies of runs with "
                    "--cache). `stats` counts each one's entries, bytes, entries by model and by "
                    "index version or served revision, and their age; `prune` removes the "
                    "entries the filters select.",
    )
    actions = p.add_subparsers(dest="cache_action", metavar="ACTION")
    actions.required = True
    stats = actions.add_parser(
        "stats", help="entries, bytes, by model and index version or revision, age; both caches")
    stats.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    stats.set_defaults(func=run_stats)
    prune = actions.add_parser(
        "prune", help="remove the entries the filters select (all of them must hold)",
        description="Remove cache entries (both caches unless --kind says one); every filter "
                    "given must hold. With no filter it refuses, unless --all says to empty "
                    "the cache.",
    )
    prune.add_argument("--kind", choices=[k.value for k in CacheKind], default=None,
                       help="only this cache: result (whole rows) or response (model replies); "
                            "default both")
    prune.add_argument("--older-than", type=_days, metavar="DAYS", default=None,
                       help="rows that finished (replies stored) more than DAYS ago (entries "
                            "without a time are kept)")
    prune.add_argument("--model", default=None, metavar="M",
                       help="rows and replies answered by model M")
    prune.add_argument("--index-version", default=None, metavar="V",
                       help="rows retrieved from index version V (never a reply: it has none)")
    prune.add_argument("--all", action="store_true", dest="all_entries",
                       help="every entry (no filter with it)")
    prune.add_argument("--dry-run", action="store_true", help="count the entries, delete nothing")
    prune.add_argument("--json", action="store_true", help="print the counts as one JSON object")
    prune.set_defaults(func=run_prune)


def _days(text: str) -> float:
    """``--older-than DAYS``: a finite number of days, 0 or more (0.5 is twelve hours)."""
    value = runtime.non_negative(text)
    if value is None:
        raise InputError(f"--older-than {text}: days, a finite number of 0 or more, e.g. "
                         "--older-than 7 (0.5 is twelve hours)")
    return value


def _when(epoch: float | None) -> str:
    return "-" if epoch is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def run_stats(args: argparse.Namespace) -> int:
    from qfarm.producer.api import cache_stats

    settings = load_settings()
    stats = cache_stats(settings)
    replies = cache_stats(settings, CacheKind.RESPONSE)
    if args.json:
        # The result cache's figures at the top level, as before; the replies' beside them.
        print(json.dumps({**stats.as_json(), "response": replies.as_json()}, ensure_ascii=False))
        return 0
    print("result cache (whole rows of earlier runs; --burn skips it):")
    _print_stats(stats, "finished", (("by model", stats.by_model),
                                     ("by index version", stats.by_index_version)))
    print("response cache (model replies of runs with --cache):")
    _print_stats(replies, "stored", (("by model", replies.by_model),
                                     ("by served revision", replies.by_revision)))
    return 0


def _print_stats(stats: CacheStats, when: str,
                 groups: tuple[tuple[str, dict[str, int]], ...]) -> None:
    print(f"  entries: {stats.entries}  bytes: {stats.bytes}"
          + (f"  unreadable: {stats.unreadable}" if stats.unreadable else ""))
    print(f"  expiry: each entry is written to expire {stats.ttl_s // DAY_S} days later"
          + (f" ({stats.no_expiry} never expire)" if stats.no_expiry else ""))
    print(f"  {when}: oldest {_when(stats.oldest)}, newest {_when(stats.newest)}")
    for title, counts in groups:
        if counts:
            print(f"  {title}: " + "  ".join(f"{k}={v}" for k, v in sorted(counts.items())))


def run_prune(args: argparse.Namespace) -> int:
    from qfarm.common.cache import CacheFilter
    from qfarm.producer.api import prune_cache

    selected = CacheFilter(
        older_than_s=None if args.older_than is None else args.older_than * DAY_S,
        model=args.model, index_version=args.index_version)
    kinds = (CacheKind(args.kind),) if args.kind else tuple(CacheKind)
    done = prune_cache(load_settings(), selected, all_entries=args.all_entries,
                       dry_run=args.dry_run, kinds=kinds)
    if args.json:
        print(json.dumps(done.as_json(), ensure_ascii=False))
    elif done.dry_run:
        print(f"dry run: {done.matched} cache entries match; nothing deleted")
    else:
        print(f"deleted {done.deleted} cache entries ({done.matched} matched)")
    return 0
