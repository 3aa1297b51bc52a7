"""A hypothesis' defaults and needs that are one platform's options apply only where that platform runs."""
from __future__ import annotations

import pytest

from elastic_chaos.errors import SpecError
from elastic_chaos.hypotheses.api import settings
from elastic_chaos.hypotheses.catalog import HYPOTHESES


def test_partition_forces_isolated_networking_on_the_local_platform_only():
    local = settings(HYPOTHESES["partition"], {}, "local")
    assert str(local.platform["network"].value if hasattr(local.platform["network"], "value")
               else local.platform["network"]) == "isolated"
    k8s = settings(HYPOTHESES["partition"], {"pg_timeout_s": 10.0}, "kubernetes")
    assert "network" not in k8s.platform and k8s.job.pg_timeout_s == 10.0


def test_an_option_no_class_declares_is_still_refused():
    with pytest.raises(SpecError, match="kubernetes accepts"):
        settings(HYPOTHESES["partition"], {"network": "isolated"}, "kubernetes")
