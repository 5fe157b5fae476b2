"""The store keeps no secret: an endpoint's URL, fingerprint and metadata are cleaned before they are written."""

from __future__ import annotations

from sqlalchemy import select

from db import queries
from db.engine import Store
from db.models import Endpoint


def test_endpoint_url_fingerprint_and_metadata_hold_no_secret(store: Store) -> None:
    fingerprint = {"models": ["m"], "engine": "sglang",
                   "get_server_info": {"api_key": "sk-fp-0123456789", "admin_api_key": None, "max_total_tokens": 8}}
    with store.session() as session:
        queries.upsert_endpoint(session, "s1", "http://user:pw-0123456789@h:1/v1?api_key=qk-0123456789", "m",
                                fingerprint, {"quantization": "int4", "hf_token": "hf-0123456789"})
        session.commit()
    with store.session() as session:
        endpoint = session.scalar(select(Endpoint).where(Endpoint.name == "s1"))
        assert endpoint is not None
        assert endpoint.base_url == "http://h:1/v1"
        assert endpoint.fingerprint["get_server_info"] == {"api_key": "***", "admin_api_key": None,
                                                           "max_total_tokens": 8}
        assert endpoint.metadata_ == {"quantization": "int4", "hf_token": "***"}
