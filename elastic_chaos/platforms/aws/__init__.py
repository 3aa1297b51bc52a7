"""AWS: EKS nodes as EC2 instances (``eks``, ``ec2``), boto3 clients (``clients``), the
guard every destructive call passes (``guard``), target resolution (``targets``) and the
calls themselves (``actions``: terminate, FIS experiments)."""
