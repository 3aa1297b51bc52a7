"""Fixtures of the ``aws`` tests: one real moto server per session (stopped by PID), a
counting proxy in front of it, boto3 clients through the proxy, and a spot fleet.

Every test starts from an empty moto (``/moto-api/reset``). Dummy credentials and
a region are set in the environment too, for the CLI tests that build their own
clients (``--endpoint-url`` points them at the proxy).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from moto_server import CountingProxy, MotoServer

REGION = "us-west-2"
CLUSTER_TAGS = {"eks:cluster-name": "gameday", "eks:nodegroup-name": "gpu-spot",
                "k8s.io/cluster-autoscaler/enabled": "true"}
FIS_ROLE = "arn:aws:iam::123456789012:role/elastic-chaos-fis"


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
    from chaos.platforms.aws import make_clients
    return make_clients(region=REGION, endpoint_url=proxy.endpoint)


@pytest.fixture
def direct(moto: MotoServer, proxy: CountingProxy) -> Any:
    """Clients straight to moto, bypassing the proxy: what plays AWS's part is not counted."""
    from chaos.platforms.aws import make_clients
    return make_clients(region=REGION, endpoint_url=moto.endpoint)


@dataclass
class Fleet:
    group: str
    spot: list[str]
    """Spot instances (launched by RunInstances, attached to the group)."""


def make_fleet(clients: Any, *, spot: int = 3, group: str = "gpu-spot-asg") -> Fleet:
    """A node group as EKS builds it: a launch template, an Auto Scaling group carrying the
    autoscaler discovery tags, and ``spot`` spot instances in it. moto launches a group's own
    members as on-demand, so the spot members are run as spot and attached (AttachInstances)."""
    ec2, asg = clients.ec2, clients.autoscaling
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    image = ec2.describe_images()["Images"][0]["ImageId"]
    ec2.create_launch_template(LaunchTemplateName=group, LaunchTemplateData={
        "ImageId": image, "InstanceType": "g5.xlarge", "InstanceMarketOptions": {"MarketType": "spot"}})
    tags = [{"Key": k, "Value": v, "PropagateAtLaunch": True} for k, v in CLUSTER_TAGS.items()]
    asg.create_auto_scaling_group(AutoScalingGroupName=group, MinSize=0, MaxSize=spot + 2, DesiredCapacity=0,
                                  VPCZoneIdentifier=subnet, Tags=tags,
                                  LaunchTemplate={"LaunchTemplateName": group, "Version": "$Latest"})
    run = ec2.run_instances(ImageId=image, MinCount=spot, MaxCount=spot, InstanceType="g5.xlarge", SubnetId=subnet,
                            InstanceMarketOptions={"MarketType": "spot"},
                            TagSpecifications=[{"ResourceType": "instance", "Tags": [
                                {"Key": k, "Value": v} for k, v in CLUSTER_TAGS.items()]}])
    ids = [i["InstanceId"] for i in run["Instances"]]
    asg.attach_instances(AutoScalingGroupName=group, InstanceIds=ids)
    ec2.create_tags(Resources=ids, Tags=[{"Key": "aws:autoscaling:groupName", "Value": group}])
    return Fleet(group=group, spot=ids)


@pytest.fixture
def fleet(clients: Any) -> Fleet:
    return make_fleet(clients)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"
