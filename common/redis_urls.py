"""``QFARM_REDIS_URL``: one URL read by two libraries, checked once for both.

The producer, the workers' row store and ``/metrics`` talk to Redis through redis-py
(``redis.Redis.from_url``); Celery's broker talks to it through kombu's redis
transport, which parses the same URL differently:

* kombu turns every query parameter into a keyword of its ``Connection``: it refuses
  ``?db=``, ``?socket_timeout=`` and the other redis-py options (``TypeError``), and
  ``?password=`` collides with the URL's own password (``multiple values for
  'password'``). Only ``ssl_*`` parameters have a meaning to both (the TLS options of a
  ``rediss://`` connection).
* kombu reads the path as the database number and refuses anything else
  (``/abc``); redis-py silently uses database 0 for it.
* kombu has no ``unix://`` transport.

So a URL is accepted when both libraries read it the same way: ``redis://`` or
``rediss://``, the database as the path's number (``/0``; none means 0), the
password in the userinfo (``redis://:PASSWORD@host:6379/0``) or as ``?password=``
(and ``?username=``), which redis-py understands and which is moved into the
userinfo for the broker (``broker_url``): the form people copy from redis-py's
documentation works rather than being refused. Pure: parsing only, no connection.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

FORM = "redis://[:PASSWORD@]HOST:PORT/DB, e.g. redis://127.0.0.1:6379/0 (rediss:// for TLS)"
CREDENTIALS = ("username", "password")
# Passed to the TLS connection by both libraries (kombu: into its ``ssl`` options).
TLS_PARAMETERS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname")
HINTS = {
    "db": "write the database as the path, e.g. redis://HOST:6379/2",
    "socket_timeout": "set QFARM_BROKER_SOCKET_TIMEOUT_S instead",
    "socket_connect_timeout": "set QFARM_BROKER_SOCKET_TIMEOUT_S instead",
}


def redis_url_problem(url: str) -> str | None:
    """Why ``url`` is not a Redis URL both redis-py and Celery's broker read alike, or None.

    The message never repeats the URL (it may hold a password), only the part at fault.
    """
    try:
        parts = urlsplit(url)
        _ = parts.port  # a malformed port or IPv6 address raises here
    except ValueError as exc:
        return f"not a URL ({exc}); expected {FORM}"
    if parts.scheme == "unix":
        return f"unix:// sockets are not supported by Celery's broker (kombu); expected {FORM}"
    if parts.scheme not in ("redis", "rediss"):
        return f"the scheme must be redis:// or rediss://, got {parts.scheme or 'none'}://; expected {FORM}"
    db = parts.path.removeprefix("/")
    if db and not (db.isascii() and db.isdigit()):
        return (f"the path must be the database number (e.g. /0), got {parts.path!r}: Celery's "
                f"broker refuses it and redis-py would silently use database 0; expected {FORM}")
    params = parse_qsl(parts.query)
    names = [name for name, _ in params]
    for name in names:
        if names.count(name) > 1:
            return f"query parameter {name!r} is given twice; give it once"
        if name in CREDENTIALS:
            given = parts.username if name == "username" else parts.password
            if given:
                return (f"the {name} is given twice, in the URL and as ?{name}=; give it once, "
                        f"e.g. redis://:PASSWORD@HOST:6379/0")
        elif name in TLS_PARAMETERS:
            if parts.scheme != "rediss":
                return f"query parameter {name!r} needs a TLS URL (rediss://)"
        else:
            hint = HINTS.get(name, "remove it")
            return (f"query parameter {name!r} is not understood by Celery's broker (kombu) "
                    f"though redis-py takes it; {hint}")
    return None


def broker_url(url: str) -> str:
    """``url`` as kombu must read it: ``?username=``/``?password=`` moved into the userinfo.

    Call on a URL ``redis_url_problem`` accepted; any other URL is returned unchanged.
    """
    parts = urlsplit(url)
    params = parse_qsl(parts.query)
    moved = {name: value for name, value in params if name in CREDENTIALS}
    if not moved:
        return url
    kept = [(name, value) for name, value in params if name not in CREDENTIALS]
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    user = quote(moved["username"], safe="") if "username" in moved else user
    password = quote(moved["password"], safe="") if "password" in moved else password
    netloc = f"{user}:{password}@{hostport}" if password else f"{user}@{hostport}"
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(kept)))
