"""Shared by the tests that build real link faults in network namespaces (tests/test_links.py,
tests/test_cluster_links.py): skip where they cannot be made, a failure under CI=true as root (CI
installs iptables: make network-testenv)."""
from __future__ import annotations

import os

import pytest

from elastic_chaos.host import links, netns


def require_links() -> None:
    """Skip with the reason link faults cannot be made here; under CI=true as root that is a failure."""
    reason = netns.unavailable_reason() or links.unavailable_reason()
    if reason:
        if os.environ.get("CI") == "true" and os.geteuid() == 0:   # .ci/run installs iptables (make network-testenv)
            pytest.fail(f"link faults cannot be made: {reason}")
        pytest.skip(f"link faults cannot be made here: {reason}")
