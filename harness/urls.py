"""An endpoint's address, one spelling: the OpenAI-compatible root ends in `/v1`.

Users type `http://h:p`, `http://h:p/` or `http://h:p/v1`; all three mean the
same server. Every request URL, every stored endpoint and SGLang's native
routes (which live beside `/v1`, not under it) are derived here.
"""

from __future__ import annotations

API_ROOT = "/v1"


def normalize_base_url(url: str) -> str:
    """`http://h:p`, `http://h:p/` and `http://h:p/v1/` all mean `http://h:p/v1`."""
    url = url.rstrip("/")
    return url if url.endswith(API_ROOT) else url + API_ROOT


def api_url(base_url: str, path: str) -> str:
    """`path` (e.g. `chat/completions`) under the OpenAI-compatible root of `base_url`, spelt any of the ways."""
    return f"{normalize_base_url(base_url)}/{path.lstrip('/')}"


def server_root(base_url: str) -> str:
    """The server root (without `/v1`), where SGLang's native routes and `/metrics` live."""
    return normalize_base_url(base_url)[: -len(API_ROOT)]
