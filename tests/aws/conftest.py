"""Fixtures of the ``aws`` tests: one real moto server per session (stopped by PID), a
counting proxy in front of it, boto3 clients through the proxy, and a spot fleet.

Every test starts from an empty moto (``/moto-api/reset``). Dummy credentials and
a region are set in the environment too, for the CLI tests that build their own
clients (``--endpoint-url`` points them at the proxy).
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_fleet import REGION, Fleet, make_fleet
from moto_server import CountingProxy, MotoServer


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/aws/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.aws)


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """A real moto server on 127.0.0.1 for the session."""
    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log").start()
    yield server
    server.stop()


@pytest.fixture
def proxy(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingProxy]:
    """An empty moto behind a fresh counting proxy; AWS env pointed at nothing real."""
    moto.reset()
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    counting = CountingProxy(moto.port).start()
    yield counting
    counting.stop()


@pytest.fixture
def clients(proxy: CountingProxy) -> Any:
    """AwsClients whose every call goes through the counting proxy to moto."""
    from elastic_chaos.platforms.aws.clients import make_clients
    return make_clients(region=REGION, endpoint_url=proxy.endpoint)


@pytest.fixture
def direct(moto: MotoServer, proxy: CountingProxy) -> Any:
    """Clients straight to moto, bypassing the proxy: what plays AWS's part is not counted."""
    from elastic_chaos.platforms.aws.clients import make_clients
    return make_clients(region=REGION, endpoint_url=moto.endpoint)


@pytest.fixture
def fleet(clients: Any) -> Fleet:
    return make_fleet(clients)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"
