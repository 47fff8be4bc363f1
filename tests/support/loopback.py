"""The loopback guard's rule: which addresses a chat-layer test may connect to.

Who calls it: tests/chatops/conftest.py (its autouse guard refuses any other address with
`LOOPBACK_ONLY` in the error) and the fake Slack's tests (which check that refusal). What it does
not do: patch anything itself (the conftest's fixture does).
"""

from __future__ import annotations

import ipaddress
from typing import Any

LOOPBACK_ONLY = "chat tests reach loopback addresses only"


def is_loopback(address: Any) -> bool:
    if isinstance(address, tuple) and address:
        host = address[0]
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False
    return isinstance(address, str | bytes)  # AF_UNIX paths are local
