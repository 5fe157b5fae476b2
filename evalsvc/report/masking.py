"""What people see of URLs, log lines and tracebacks: passwords and keys masked, at the command line and in the
dashboard alike. The masking rules are `harness.redact`'s; this is where the two edges turn them on and read them.
"""

from __future__ import annotations

from harness.redact import has_credentials, install_redaction, mask_url, register_url_secrets

__all__ = ["has_credentials", "mask_from_now_on", "mask_url"]


def mask_from_now_on(*urls: str | None) -> None:
    """Mask every log line and uncaught traceback of this process from now on, and in them the passwords and keys
    these URLs carry (idempotent)."""
    install_redaction()
    for url in urls:
        register_url_secrets(url)
