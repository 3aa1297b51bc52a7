from __future__ import annotations

import signal
from typing import Any

# A test run started in the background of a shell script (nohup ... &) inherits SIGINT ignored, and so would
# every process the tests start: the ones that stop a child with SIGINT, as a terminal's Ctrl-C does, would
# see it ignored and time out. The toolkit keeps an inherited SIG_IGN on purpose (elastic_chaos.signals.install); the
# tests play the terminal, so they hear SIGINT.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

pytest_plugins = ["pytester"]


def _work_unit(nodeid: str) -> str:
    """The tests one xdist worker runs together: those of a session-scoped server that each worker would
    otherwise start once more on two cores (tests/k8s: a real kube-apiserver and its etcd; tests/aws: moto),
    else a module, so a module's fixtures are made once. (xdist's own --dist loadgroup reads a mark that
    pytest 9 no longer lets it fold into the node id: it spread the kube-apiserver tests over both workers.)"""
    for folder in ("tests/k8s/", "tests/aws/"):
        if nodeid.startswith(folder):
            return folder
    return nodeid.split("::", 1)[0]


def pytest_xdist_make_scheduler(config: Any, log: Any) -> Any:
    """`make test` runs tests/ on 2 workers (TEST_WORKERS): whole work units (above) to each."""
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    return ByWorkUnit(config, log)
