"""The one URL redactor: every URL the farm writes (manifests, summaries, rows, API
answers) or prints (errors, status lines) goes through ``redact_url``.

Redis URLs (``QFARM_REDIS_URL``) and LLM endpoints (``QFARM_LLM_ENDPOINTS``) may both
carry a password, in the userinfo (``http://user:PW@host:8000``) or, for Redis, in the
query (``?password=PW``).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote_plus, urlsplit, urlunsplit

UNPARSEABLE = "<unparseable URL>"


def redact_url(url: str) -> str:
    """``url`` safe to print: every password (userinfo or ``?password=``) replaced by ***.

    Split the way redis-py and httpx split it (``urlsplit``: the userinfo ends at the
    last ``@`` of the authority, so a password may contain ``@``); a URL that does not
    parse is not printed at all. A user name alone is kept: it is not a secret.
    """
    if "//" not in url and "@" in url:
        # No scheme (``user:PW@gpu1:8000``, a typo the endpoint check reports): read the
        # text as an authority, or the password would pass for a path.
        return redact_url("//" + url).removeprefix("//")
    try:
        parts = urlsplit(url)
        _ = parts.port  # a malformed authority raises here, not later
    except ValueError:
        return UNPARSEABLE
    userinfo, at, hostport = parts.netloc.rpartition("@")
    netloc = f"{userinfo.partition(':')[0]}:***@{hostport}" if at and ":" in userinfo else parts.netloc
    return urlunsplit(parts._replace(netloc=netloc, query=_redact_query(parts.query)))


def redact_urls(urls: Iterable[str]) -> list[str]:
    return [redact_url(u) for u in urls]


def _redact_query(query: str) -> str:
    fields = query.split("&") if query else []
    return "&".join(
        f"{name}=***" if unquote_plus(name).lower() == "password" else field
        for field in fields
        for name in (field.partition("=")[0],)
    )
