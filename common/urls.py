"""The one URL redactor: every URL the farm writes (manifests, summaries, rows, API
answers) or prints (errors, status lines) goes through ``redact_url``.

Redis URLs (``QFARM_REDIS_URL``), LLM endpoints (``QFARM_LLM_ENDPOINTS``) and search
clusters (``QFARM_ES_URL``) may carry a password or a token, in the userinfo
(``http://user:PW@host:8000``, ``http://TOKEN@host``) or in the query
(``?password=PW``, ``?token=T``).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote_plus, urlsplit, urlunsplit

UNPARSEABLE = "<unparseable URL>"


def redact_url(url: str) -> str:
    """``url`` safe to print: every password (userinfo or ``?password=``) replaced by ***.

    Split the way redis-py and httpx split it (``urlsplit``: the userinfo ends at the
    last ``@`` of the authority, so a password may contain ``@``); a URL that does not
    parse is not printed at all. Query fields named like a secret (``password``,
    ``token``, ``api_key``, ``secret``, ``sig``...) are hidden too. A user name beside a
    password is kept; a user name alone in an http(s) URL is hidden, since there it is the
    whole credential (``http://TOKEN@host``); a Redis URL's is its ACL user, not a secret.
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
    if at and ":" in userinfo:
        netloc = f"{userinfo.partition(':')[0]}:***@{hostport}"
    elif at and parts.scheme in ("http", "https"):
        netloc = f"***@{hostport}"
    else:
        netloc = parts.netloc
    return urlunsplit(parts._replace(netloc=netloc, query=_redact_query(parts.query)))


def redact_urls(urls: Iterable[str]) -> list[str]:
    return [redact_url(u) for u in urls]


# Query field names that carry a secret, compared casefolded without - and _.
SECRET_FIELDS = frozenset({"password", "passwd", "pwd", "pass", "token", "accesstoken", "apikey",
                           "key", "secret", "clientsecret", "auth", "authorization", "sig",
                           "signature", "credential", "credentials"})


def _redact_query(query: str) -> str:
    fields = query.split("&") if query else []
    return "&".join(
        f"{name}=***" if _secret_name(name) else field
        for field in fields
        for name in (field.partition("=")[0],)
    )


def _secret_name(name: str) -> bool:
    return unquote_plus(name).lower().replace("-", "").replace("_", "") in SECRET_FIELDS
