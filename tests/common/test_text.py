from __future__ import annotations

import json

import pytest

from qfarm.common.text import REPLACEMENT, replace_lone_surrogates, replace_lone_surrogates_in


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("plain ascii", "plain ascii"),
        ("café – ok", "café – ok"),
        ("a\ud800b", f"a{REPLACEMENT}b"),
        ("ends high \ud800", f"ends high {REPLACEMENT}"),
        ("\udfff starts low", f"{REPLACEMENT} starts low"),
        ("\ud800\ud800", REPLACEMENT * 2),
        ("\udc00\ud800", REPLACEMENT * 2),  # low then high: not a pair
        ("\ud83d\ude00", "😀"),  # a pair held as two code points is the character
        ("", ""),
    ],
)
def test_lone_surrogates_are_replaced_and_pairs_joined(raw, clean):
    assert replace_lone_surrogates(raw) == clean


def test_the_result_always_encodes_as_utf8():
    raw = json.loads('"x \\ud800 y \\udbff\\udfff z \\udc00"')  # what a JSON reply can carry
    with pytest.raises(UnicodeEncodeError):
        raw.encode()
    replace_lone_surrogates(raw).encode()


def test_every_string_of_a_json_like_value_is_made_valid():
    raw = {"q\ud800": ["a\udfff", {"b": "\ud800"}, 1, None, 2.5], "ok": ("c",)}
    clean = replace_lone_surrogates_in(raw)
    assert clean == {f"q{REPLACEMENT}": [f"a{REPLACEMENT}", {"b": REPLACEMENT}, 1, None, 2.5], "ok": ["c"]}
    json.dumps(clean, ensure_ascii=False).encode()
