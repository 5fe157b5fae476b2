"""One spelling of an endpoint's address, whichever way the user typed it."""

from __future__ import annotations

import pytest

from harness.urls import api_url, normalize_base_url, server_root

SPELLINGS = ["http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/", "http://h:1//"]


@pytest.mark.parametrize("given", SPELLINGS)
def test_every_spelling_of_one_server_gives_the_same_urls(given: str) -> None:
    assert normalize_base_url(given) == "http://h:1/v1"
    assert api_url(given, "/chat/completions") == api_url(given, "chat/completions") == "http://h:1/v1/chat/completions"
    assert server_root(given) == "http://h:1"


def test_a_path_prefix_before_v1_is_kept() -> None:
    assert normalize_base_url("https://proxy.example/team/a/v1") == "https://proxy.example/team/a/v1"
    assert server_root("https://proxy.example/team/a") == "https://proxy.example/team/a"
    assert api_url("https://proxy.example/team/a", "models") == "https://proxy.example/team/a/v1/models"
