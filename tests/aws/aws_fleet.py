"""A node group as EKS builds it, in moto: the constants and builder the aws tests share."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REGION = "us-west-2"
CLUSTER_TAGS = {"eks:cluster-name": "gameday", "eks:nodegroup-name": "gpu-spot",
                "k8s.io/cluster-autoscaler/enabled": "true"}
FIS_ROLE = "arn:aws:iam::123456789012:role/elastic-chaos-fis"



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
