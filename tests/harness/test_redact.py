"""Masking store URLs, endpoint URLs and keys for people, logs and the store."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from sqlalchemy.engine import make_url

from harness.redact import (
    MASK, has_credentials, install_redaction, is_secret_name, mask_text, mask_url, register_secret, scrub,
    strip_credentials,
)
from tests.conftest import ROOT


@pytest.mark.parametrize(("url", "masked", "stripped"), [
    ("postgresql+psycopg://evalsvc:hunter2@127.0.0.1:5432/db", "postgresql+psycopg://evalsvc:***@127.0.0.1:5432/db",
     "postgresql+psycopg://127.0.0.1:5432/db"),
    ("postgresql://u:p%40ss@h/db", "postgresql://u:***@h/db", "postgresql://h/db"),
    ("postgresql://u:pa/ss@h/db", "postgresql://u:***@h/db", "postgresql://h/db"),
    ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db", "postgresql://h/db"),
    ("postgresql://u@h/db", "postgresql://u@h/db", "postgresql://h/db"),
    ("postgresql://u:pw@h/db?sslpassword=x&sslmode=require", "postgresql://u:***@h/db?sslpassword=***&sslmode=require",
     "postgresql://h/db?sslmode=require"),
    ("http://sk-token@h:30000/v1", "http://***@h:30000/v1", "http://h:30000/v1"),
    ("https://user:pw@h/v1?api_key=abc&x=1#top", "https://user:***@h/v1?api_key=***&x=1#top", "https://h/v1?x=1#top"),
    ("http://h/v1?token=zz", "http://h/v1?token=***", "http://h/v1"),
    ("http://h:8080/users/a@b", "http://h:8080/users/a@b", "http://h:8080/users/a@b"),
    ("http://127.0.0.1:30000/v1", "http://127.0.0.1:30000/v1", "http://127.0.0.1:30000/v1"),
    ("sqlite:////tmp/a.db", "sqlite:////tmp/a.db", "sqlite:////tmp/a.db"),
    ("/tmp/evalsvc.db", "/tmp/evalsvc.db", "/tmp/evalsvc.db"),
])
def test_mask_and_strip(url: str, masked: str, stripped: str) -> None:
    assert mask_url(url) == masked
    assert strip_credentials(url) == stripped
    assert has_credentials(url) == (masked != url)


@pytest.mark.parametrize("url", [
    "postgresql+psycopg://evalsvc:hunter2@127.0.0.1:5432/db", "postgresql://u:p%40ss@h/db", "postgresql://u@h/db",
    "mysql+pymysql://root:toor@db.example:3306/evals",
])
def test_database_urls_are_masked_as_sqlalchemy_does(url: str) -> None:
    assert mask_url(url) == make_url(url).render_as_string(hide_password=True)


def test_text_hides_urls_bearer_tokens_pairs_and_registered_secrets() -> None:
    register_secret("sk-registered-0123456789")
    text = ("POST http://u:pw@h/v1/chat/completions?key=k1 failed; Authorization: Bearer abcdefghij; "
            "dsn host=h password=hunter22 user=u; echo sk-registered-0123456789")
    masked = mask_text(text)
    for secret in ("pw@", "k1", "abcdefghij", "hunter22", "sk-registered-0123456789"):
        assert secret not in masked, secret
    assert "http://u:***@h/v1/chat/completions?key=***" in masked and "host=h" in masked and "user=u" in masked


def test_short_values_are_not_registered() -> None:
    register_secret("evalsvc")  # the default development password: masking it would hide the program's name
    assert mask_text("evalsvc run") == "evalsvc run"


def test_scrub_masks_credential_keys_and_strings_but_keeps_the_rest() -> None:
    fingerprint = {"models": ["m"], "get_server_info": {
        "api_key": "sk-1", "admin_api_key": None, "hf_token": "hf_x", "max_total_tokens": 5,
        "tokenizer_path": "/m", "url": "http://a:b@c/", "nested": [{"password": "x"}]}}
    assert scrub(fingerprint) == {"models": ["m"], "get_server_info": {
        "api_key": MASK, "admin_api_key": None, "hf_token": MASK, "max_total_tokens": 5,
        "tokenizer_path": "/m", "url": "http://a:***@c/", "nested": [{"password": MASK}]}}


@pytest.mark.parametrize(("name", "secret"), [
    ("api_key", True), ("X-Api-Key", True), ("PGPASSWORD", True), ("Authorization", True), ("apiKey", True),
    ("hf_token", True), ("ssl_keyfile_password", True), ("max_total_tokens", False), ("tokenizer_path", False),
    ("model_path", False), ("SSL_KEY_FILE", False), ("AWS_ACCESS_KEY_ID", False), ("PASS_K", False),
    ("ssl_keyfile", False), ("AUTH_MODE", False),
])
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_log_records_and_uncaught_tracebacks_are_masked() -> None:
    code = (
        "import logging, sys\n"
        "from harness.redact import install_redaction, register_secret\n"
        "install_redaction(); register_secret('sk-in-a-child-process')\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout)\n"
        "logging.getLogger('x').info('key %s at %s', 'sk-in-a-child-process', 'postgresql://u:pw123@h/db')\n"
        "try:\n    raise ValueError('inner sk-in-a-child-process')\n"
        "except ValueError:\n    logging.getLogger('x').exception('failed')\n"
        "raise RuntimeError('cannot reach http://u:pw456@h/v1')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    out = done.stdout + done.stderr
    assert "RuntimeError: cannot reach http://u:***@h/v1" in out and "INFO:x:key *** at postgresql://u:***@h/db" in out
    assert "ValueError: inner ***" in out
    for secret in ("sk-in-a-child-process", "pw123", "pw456"):
        assert secret not in out, secret


def test_install_is_idempotent(caplog: pytest.LogCaptureFixture) -> None:
    install_redaction()
    install_redaction()
    register_secret("sk-twice-installed-key")
    with caplog.at_level(logging.INFO):
        logging.getLogger("t").info("using %s", "sk-twice-installed-key")
    assert caplog.messages == ["using ***"]
