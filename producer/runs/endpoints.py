"""Checking LLM endpoints before a run is created.

An endpoint passes when ``GET /v1/models`` answers the OpenAI model list
(``{"data": [{"id": ...}, ...]}``) and one of its ids is the configured model
(QFARM_MODEL). Anything else would give a run whose every row is an error: any
HTTP server answers *something* (``python3 -m http.server`` says 501 to every
POST), and vLLM or llama.cpp serving another model say 404 to every request.
llama.cpp's server lists the model file's path as the id unless it was started
with ``--model_alias``, so the error lists the ids served, ready to copy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from qfarm.common.errors import ConfigError
from qfarm.common.urls import redact_url
from qfarm.common.vocab import SIMULATOR_HEADER

MAX_IDS_SHOWN = 10


@dataclass(frozen=True)
class ProbeResult:
    alive: list[str]
    simulated: bool  # the first live endpoint is the qfarm vLLM simulator


class NotOpenAI(Exception):
    """The endpoint answered, but not with the OpenAI model list."""


def served_model_ids(body: bytes) -> list[str]:
    """The ids of an OpenAI ``/v1/models`` answer; NotOpenAI says what is wrong with it."""
    try:
        payload: Any = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise NotOpenAI("not JSON") from None
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        raise NotOpenAI('JSON without a "data" list')
    ids = [e.get("id") for e in data if isinstance(e, dict)]
    named = [i for i in ids if isinstance(i, str)]
    if not named or len(named) != len(data):
        raise NotOpenAI('a "data" list without model ids')
    return named


def _shown(ids: list[str]) -> str:
    more = f" and {len(ids) - MAX_IDS_SHOWN} more" if len(ids) > MAX_IDS_SHOWN else ""
    return repr(ids[:MAX_IDS_SHOWN])[:-1] + more + "]"


def probe_endpoints(
    endpoints: list[str], *, model: str | None = None,
    api_keys: Mapping[str, str | None] | None = None, timeout_s: float = 5.0,
) -> ProbeResult:
    """The endpoints that answer /v1/models (and whether they are the simulator); raise if
    none answers, or if one answers that is not an OpenAI-compatible server or does not
    serve ``model`` (every job sent there would fail).

    ``api_keys`` maps an endpoint to the key the gateway will send it (per-endpoint keys
    differ when the endpoints sit behind different proxies).
    """
    alive: list[str] = []
    simulated: bool | None = None
    problems: list[str] = []  # down for now: the balancer skips it, the run can go on
    wrong: list[str] = []  # answering but unusable: a configuration error
    # A client that may meet TLS loads the certificate store (20 ms a client here); plain
    # HTTP endpoints (a farm's own network, the simulator) have no certificate to check.
    tls = any(url.lower().startswith("https:") for url in endpoints)
    with httpx.Client(timeout=timeout_s, verify=tls) as client:
        for url in endpoints:
            shown = redact_url(url)
            key = (api_keys or {}).get(url)
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            try:
                resp = client.get(f"{url}/v1/models", headers=headers)
            except httpx.HTTPError as exc:
                problems.append(f"{shown} unreachable ({type(exc).__name__})")
                continue
            if resp.status_code in (401, 403):
                # Every job would fail with the same refusal: a configuration error, said now.
                raise ConfigError(
                    f"{shown} refused the API key ({resp.status_code}): set its key in "
                    "QFARM_LLM_API_KEYS (URL=KEY,...) or QFARM_LLM_API_KEY"
                )
            if resp.status_code >= 500:
                problems.append(f"{shown} answered {resp.status_code}")
                continue
            try:
                if resp.status_code != 200:
                    raise NotOpenAI(f"status {resp.status_code}")
                ids = served_model_ids(resp.content)
            except NotOpenAI as exc:
                wrong.append(f"{shown} is not an OpenAI-compatible server (GET /v1/models "
                             f"answered {exc}); point QFARM_LLM_ENDPOINTS at a vLLM or "
                             "llama.cpp server's base URL")
                continue
            if model is not None and model not in ids:
                wrong.append(f"{shown} serves {_shown(ids)}, not {model!r}: set QFARM_MODEL "
                             "to one of those ids (or serve that model there)")
                continue
            alive.append(url)
            if simulated is None:
                simulated = SIMULATOR_HEADER in resp.headers
    if wrong:
        raise ConfigError("; ".join(wrong))
    if not alive:
        raise ConfigError(
            "no LLM endpoint is reachable: " + "; ".join(problems)
            + ". Check QFARM_LLM_ENDPOINTS (comma-separated base URLs such as http://gpu1:8000), "
            "or unset it to use the built-in vLLM simulator"
        )
    return ProbeResult(alive=alive, simulated=bool(simulated))
