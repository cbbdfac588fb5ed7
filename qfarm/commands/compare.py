"""`qfarm compare`: not written yet."""

from __future__ import annotations

import argparse

from common.errors import QfarmError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="(not yet available)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise QfarmError("qfarm compare is not available yet")
