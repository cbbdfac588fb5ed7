"""The endpoint probe sends each endpoint the key the gateway will send it."""

from __future__ import annotations

import pytest

from common.errors import ConfigError
from common.settings import Settings
from ops.sim.launch import start_simulator
from producer.api import configured_endpoints

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_keyed_sims():
    with start_simulator(latency="zero", profile="clean", api_key="key-a") as a, \
            start_simulator(latency="zero", profile="clean", api_key="key-b") as b:
        yield a.url, b.url


def test_per_endpoint_keys_reach_each_endpoint(two_keyed_sims, tmp_path):
    a, b = two_keyed_sims
    settings = Settings(results_dir=tmp_path, llm_endpoints=f"{a},{b}",
                        llm_api_keys=f"{a}=key-a,{b}=key-b")
    with configured_endpoints(settings) as eps:
        assert eps.urls == [a, b]
        assert eps.simulated


def test_a_refused_key_is_a_config_error_naming_the_endpoint(two_keyed_sims, tmp_path):
    a, b = two_keyed_sims
    # One shared key fits only the first endpoint: every job sent to the second would fail.
    settings = Settings(results_dir=tmp_path, llm_endpoints=f"{a},{b}", llm_api_key="key-a")
    with pytest.raises(ConfigError) as info:
        with configured_endpoints(settings):
            pass
    assert f"{b} refused the API key (401)" in str(info.value)
    assert "key-a" not in str(info.value)
