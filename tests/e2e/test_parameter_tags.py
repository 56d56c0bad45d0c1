"""What the instance policy rests on (template.yaml, InstanceRole): every member parameter carries
the tag etcd-asg-instance-arn = its instance's ARN, the value an instance's own requests carry as
ec2:SourceInstanceARN. The simulation does not evaluate IAM; this checks the tags it would match."""

TAG = "etcd-asg-instance-arn"


def test_every_member_parameter_is_tagged_with_its_instance_arn(simulation):
    sim = simulation(writer=False)
    sim.scale(3)
    sim.wait_converged(3, label="bootstrap")
    sim.scale(4)
    sim.wait_converged(4, label="scale out")
    ids = sorted(i["InstanceId"] for i in sim.group_instances())
    account = sim.describe_group()["AutoScalingGroupARN"].split(":")[4]
    for iid in ids:
        tags = sim.ssm.list_tags_for_resource(ResourceType="Parameter", ResourceId=f"{sim.prefix}/members/{iid}")
        values = [t["Value"] for t in tags["TagList"] if t["Key"] == TAG]
        assert values == [f"arn:aws:ec2:us-east-1:{account}:instance/{iid}"], (iid, tags["TagList"])
