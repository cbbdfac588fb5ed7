"""The metric field encoding and the latency histogram built from flushed counters."""

from __future__ import annotations

import pytest

from qfarm.common import metrics as m


def test_fields_round_trip_and_refuse_wrong_labels():
    raw = m.field(m.ROWS, "quote", "STRICT")
    assert raw == "rows|quote|STRICT"
    assert m.parse_field(raw) == ("rows", ("quote", "STRICT"))
    assert m.field(m.LLM_REQUESTS, "http://a|b") == "llm_requests|http://a/b"
    assert m.parse_field("unknown|x") is None
    assert m.parse_field("rows|quote") is None
    with pytest.raises(ValueError, match="takes labels"):
        m.field(m.ROWS, "quote")


def test_counters_take_leaves_zero_and_observe_counts_every_part():
    c = m.Counters()
    c.observe_request("http://gpu1:8000", 0.3, None)
    c.observe_request("http://gpu1:8000", 200.0, "LLMTimeoutError")
    taken = c.take()
    assert taken["llm_requests|http://gpu1:8000"] == 2
    assert taken["llm_errors|http://gpu1:8000|LLMTimeoutError"] == 1
    assert taken[f"llm_latency_bucket|http://gpu1:8000|{m.LATENCY_BUCKETS_S.index(0.5)}"] == 1
    assert taken[f"llm_latency_bucket|http://gpu1:8000|{len(m.LATENCY_BUCKETS_S)}"] == 1  # +Inf
    assert taken["llm_latency_sum_us|http://gpu1:8000"] == 200_300_000
    assert c.take() == {}


def test_histograms_are_cumulative_and_end_with_inf():
    c = m.Counters()
    for s in (0.01, 0.07, 0.07, 3.0, 500.0):
        c.observe_request("e", s, None)
    (h,) = m.histograms(m.parse_counters(c.take())).values()
    bounds = dict(h.buckets)
    assert bounds["0.05"] == 1 and bounds["0.1"] == 3 and bounds["5"] == 4
    assert h.buckets[-1] == ("+Inf", 5)
    assert h.sum_s == pytest.approx(503.15)


@pytest.mark.parametrize(("queues", "role"), [
    (["interactive"], "interactive"), (["generate"], "gpu"), (["retrieve", "verify"], "cpu"),
    (["retrieve"], "cpu"), (["retrieve", "generate", "verify", "interactive"], "mixed"),
])
def test_role_names_follow_the_procfile(queues, role):
    assert m.role_of(queues) == role
