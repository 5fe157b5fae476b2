"""Secrets kept out of what people and files see: store URLs, endpoint URLs, API keys.

`mask_url` renders one URL for people: the password of `scheme://user:password@host`
becomes `***` (as SQLAlchemy's `URL.render_as_string(hide_password=True)` does),
so does a bare token in an http(s) URL's user part, and so does the value of any
query parameter whose name says it is a credential (`?api_key=...`, `?token=...`).
`mask_text` does that to every URL inside a message, and also hides `Bearer`
tokens, `password=...` pairs and every secret registered with `register_secret`
(the API key and store password a command was given), wherever they appear.

`install_redaction` makes that the default for a process: every log record and
every uncaught traceback is masked before it is written, so a message that
forgets to call `mask_url` still cannot leak a registered secret.

`scrub` cleans JSON-like data before it is stored (endpoint fingerprints, run
metadata): values under credential-named keys are masked and strings masked.
`strip_credentials` is the URL to store or pass on: user part and credential
query parameters removed, so it still works for whatever needs no secret.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import traceback
from collections.abc import Iterable
from types import TracebackType
from typing import Any
from urllib.parse import unquote

MASK = "***"
# Shorter values would mask ordinary words (a password "evalsvc" would hide the program's name).
MIN_SECRET_LEN = 8

# Name parts (split on _ and -, lower-cased) that mark a credential: api_key, hf_token, admin-password...
_SECRET_PARTS = frozenset({
    "key", "apikey", "token", "secret", "password", "passwd", "pwd", "passphrase", "authorization", "auth",
    "credential", "credentials", "cookie", "signature",
})
# A last part that makes the name about a secret, not the secret: SSL_KEY_FILE, ACCESS_KEY_ID, AUTH_MODE.
_NOT_SECRET_LAST = frozenset({
    "file", "filename", "path", "dir", "id", "name", "type", "mode", "url", "header", "len", "length", "size", "count",
})
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
_HOST_PORT = re.compile(r"[^:/@]*:\d+/")
_BEARER = re.compile(r"(?i)\b(bearer)(\s+)[A-Za-z0-9._~+/=\-]{6,}")
_PAIR = re.compile(
    r"(?i)\b([\w\-]*(?:password|passwd|secret|api[_\-]?key|access[_\-]?token|auth[_\-]?token|authorization))"
    r"(\"?'?\s*[:=]\s*\"?'?)([^\s\"'&,;}\]]+)"
)

_known: set[str] = set()
_known_lock = threading.Lock()


def is_secret_name(name: str) -> bool:
    """True for names such as api_key, hf_token, PGPASSWORD, Authorization, X-Api-Key."""
    lowered = name.lower()
    parts = [part for part in re.split(r"[_\-.\s]+", lowered) if part]
    if not parts or parts[-1] in _NOT_SECRET_LAST:
        return False
    return lowered.endswith(("password", "passwd", "apikey", "secret")) or any(part in _SECRET_PARTS for part in parts)


def register_secret(value: str | None) -> None:
    """Mask `value` in every later `mask_text` of this process (logs, errors, tracebacks)."""
    if value and len(value) >= MIN_SECRET_LEN:
        with _known_lock:
            _known.update({value, unquote(value)})


def register_url_secrets(url: str | None) -> None:
    """Register the password and credential query values a URL carries."""
    for value in url_secrets(url or ""):
        register_secret(value)


def known_secrets() -> frozenset[str]:
    with _known_lock:
        return frozenset(_known)


# --- URLs ------------------------------------------------------------------------------------


def _split(url: str) -> tuple[str, str | None, str, str]:
    """(`scheme://`, user part or None, host and path, `?query#fragment`) of a URL.

    The user part ends at the last '@' of the authority; failing that, at an '@' later in the path
    when what precedes it holds a ':' and is not `host:port/` (SQLAlchemy allows '/' in a password).
    """
    scheme, _, rest = url.partition("://")
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    body, tail = rest[:cut], rest[cut:]
    authority = body.split("/", 1)[0]
    if "@" in authority:
        user: str | None = authority.rpartition("@")[0]
    else:
        head = body[: body.rfind("@")] if "@" in body else ""
        user = head if ":" in head and not _HOST_PORT.match(head) else None
    if user is None:
        return scheme + "://", None, body, tail
    return scheme + "://", user, body[len(user) + 1:], tail


def url_secrets(url: str) -> list[str]:
    """The password (or bare http token) and the credential query values in `url`."""
    if "://" not in url:
        return []
    prefix, user, _, tail = _split(url)
    found = []
    if user is not None:
        name, colon, password = user.partition(":")
        if colon and password:
            found.append(password)
        elif not colon and prefix.lower().startswith("http") and name:
            found.append(name)
    for name, value in _query_pairs(tail):
        if value and is_secret_name(unquote(name)):
            found.append(value)
    return found


def _query_pairs(tail: str) -> list[tuple[str, str]]:
    query = tail[1:].split("#", 1)[0] if tail.startswith("?") else ""
    return [(p.partition("=")[0], p.partition("=")[2]) for p in query.split("&") if p]


def _rewrite(url: str, user_part: str | None, drop_secret_params: bool) -> str:
    prefix, _, host, tail = _split(url)
    if tail.startswith("?"):
        query, hash_mark, fragment = tail[1:].partition("#")
        kept = []
        for pair in query.split("&"):
            name, eq, value = pair.partition("=")
            if value and is_secret_name(unquote(name)):
                if drop_secret_params:
                    continue
                pair = f"{name}{eq}{MASK}"
            kept.append(pair)
        tail = ("?" + "&".join(kept) if kept else "") + hash_mark + fragment
    return prefix + (f"{user_part}@" if user_part is not None else "") + host + tail


def mask_url(url: str) -> str:
    """The URL for people: `postgresql://user:***@host/db`, `http://***@host/v1`, `...?api_key=***`.

    Anything that is not a URL (an SQLite file path, a model name) comes back unchanged.
    """
    if not isinstance(url, str) or "://" not in url:
        return url
    prefix, user, _, _ = _split(url)
    if user is not None:
        name, colon, password = user.partition(":")
        if colon and password:
            user = f"{name}:{MASK}"
        elif not colon and prefix.lower().startswith("http") and name:
            user = MASK
    return _rewrite(url, user, drop_secret_params=False)


def strip_credentials(url: str) -> str:
    """The URL with no user part and no credential query parameters: what may be stored or passed on."""
    if not isinstance(url, str) or "://" not in url:
        return url
    return _rewrite(url, None, drop_secret_params=True)


def has_credentials(url: str) -> bool:
    """True when `url` carries a password, an http token or a credential query parameter."""
    return bool(url_secrets(url))


# --- free text and data ---------------------------------------------------------------------


def mask_text(text: str) -> str:
    """`text` with every URL masked, Bearer tokens and password=... values hidden, known secrets replaced."""
    if not text:
        return text
    masked = _URL.sub(lambda m: mask_url(m.group(0)), text)
    masked = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", masked)
    masked = _PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", masked)
    for secret in sorted(known_secrets(), key=len, reverse=True):
        masked = masked.replace(secret, MASK)
    return masked


def scrub(value: Any) -> Any:
    """JSON-like data safe to store: credential-named keys masked (when set), every string masked."""
    if isinstance(value, dict):
        return {key: (MASK if value[key] and is_secret_name(str(key)) else scrub(value[key])) for key in value}
    if isinstance(value, (list, tuple)):
        return [scrub(item) for item in value]
    if isinstance(value, str):
        return mask_text(value)
    return value


def scrub_env(env: dict[str, str], names: Iterable[str]) -> dict[str, str]:
    """A copy of `env` without the variables in `names`."""
    drop = set(names)
    return {key: value for key, value in env.items() if key not in drop}


class MaskedError(Exception):
    """An exception whose message is masked when it is made, so no handler can show the raw URL or key."""

    def __init__(self, message: str = "", *args: object) -> None:
        super().__init__(mask_text(str(message)), *args)


# --- process-wide defaults ------------------------------------------------------------------

_installed = False


def install_redaction() -> None:
    """Mask every log record and uncaught traceback of this process from now on (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    make_record = logging.getLogRecordFactory()

    def masked_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return _mask_record(make_record(*args, **kwargs))

    logging.setLogRecordFactory(masked_record)
    previous_hook = sys.excepthook

    def masked_hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if previous_hook is not sys.__excepthook__:
            previous_hook(kind, exc, tb)
            return
        sys.stderr.write(mask_text("".join(traceback.format_exception(kind, exc, tb))))

    sys.excepthook = masked_hook


def _mask_record(record: logging.LogRecord) -> logging.LogRecord:
    try:
        message = record.getMessage()
    except Exception:  # a record with bad arguments is the logging module's to report
        return record
    masked = mask_text(message)
    if masked != message:
        record.msg, record.args = masked, None
    if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
        record.exc_text = mask_text("".join(traceback.format_exception(*record.exc_info)).rstrip("\n"))
    return record
