"""`qfarm sets`: the question sets that ship with qfarm, for `qfarm sweep NAME`."""

from __future__ import annotations

import argparse

from qfarm import question_sets
from qfarm.common.questions import parse_questions


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sets", help="list the question sets shipped with qfarm (qfarm sweep NAME)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    sets = question_sets.shipped()
    if not sets:
        print("qfarm: no shipped question sets found (an install without package data?)")
        return 1
    for name, path in sets.items():
        count = len(parse_questions(str(path), path.read_text(encoding="utf-8")))
        print(f"{name:24s} {count:6d} questions  {path}")
    return 0
