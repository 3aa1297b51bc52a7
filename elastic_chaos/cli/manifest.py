"""``elastic-chaos manifest``: print the YAML a Kubernetes run would apply.

For review before a game day, and for GitOps users who apply the job
themselves: the same objects the kubernetes/kind platforms create (job,
etcd Deployment + Service, checkpoint claim), rendered by
elastic_chaos.platforms.kubernetes.manifests. Touches no cluster.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from elastic_chaos.errors import SpecError

DESCRIPTION = """Print the manifests (multi-document YAML) for one elastic job on Kubernetes:
the ElasticJob or PyTorchJob, its etcd (3.5, v2 API) and its checkpoint volume.

examples:
  elastic-chaos manifest --platform kind --job-kind elasticjob --nodes 1:2 | kubectl apply -f -
  elastic-chaos manifest --platform kubernetes --job-kind pytorchjob --preset eks-gpu \\
      --image 123.dkr.ecr.us-west-2.amazonaws.com/train:1 --gpus-per-node 8 --nproc-per-node 8 \\
      --efa-per-node 4 --nodes 2:8 --storage-class efs-sc --namespace training
"""


def register(sub: Any) -> None:
    p = sub.add_parser("manifest", help="print the Kubernetes YAML a run would apply", description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--platform", choices=["kubernetes", "kind"], default="kubernetes",
                   help="kind: kind/'s defaults (spot taint, host-path checkpoints, etcd NodePort)")
    p.add_argument("--job-kind", choices=["elasticjob", "pytorchjob"], default="elasticjob")
    p.add_argument("--preset", choices=["none", "eks-gpu"], default="none",
                   help="eks-gpu: GPU pods on spot capacity, EFS claim, large /dev/shm")
    j = p.add_argument_group("job")
    j.add_argument("--run-id", help="names the job and its pods (default: chaos-<random>)")
    j.add_argument("--nodes", default="1:2", help="elastic node range MIN:MAX (default 1:2)")
    j.add_argument("--nproc-per-node", type=int, default=1, help="workers per pod (= GPUs per pod on GPUs)")
    j.add_argument("--rdzv-backend", choices=["etcd-v2", "c10d"], default="etcd-v2")
    j.add_argument("--max-restarts", type=int, default=3)
    j.add_argument("--checkpoint-every", type=int, default=20)
    j.add_argument("--step-time", type=float, default=0.1)
    c = p.add_argument_group("cluster")
    c.add_argument("--namespace", default="default")
    c.add_argument("--image", help="trainer image (default: elastic-chaos-trainer:dev from kind/Dockerfile)")
    c.add_argument("--gpus-per-node", type=int, help="nvidia.com/gpu per pod")
    c.add_argument("--efa-per-node", type=int, help="vpc.amazonaws.com/efa per pod")
    c.add_argument("--cpu", help="CPU request/limit per pod (e.g. 4)")
    c.add_argument("--memory", help="memory request/limit per pod (e.g. 16Gi)")
    c.add_argument("--shm-size", help="size of /dev/shm (e.g. 8Gi)")
    c.add_argument("--storage-class", help="StorageClass of the checkpoint claim (efs-sc, fsx-sc)")
    c.add_argument("--existing-claim", help="mount this PVC instead of creating one")
    c.add_argument("--toleration", action="append", metavar="KEY[=VALUE]:EFFECT",
                   help="worker pod toleration (repeatable)")
    c.add_argument("--node-selector", action="append", metavar="KEY=VALUE",
                   help="worker pod node selector (repeatable)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from elastic_chaos.platforms.kubernetes import jobs
    from elastic_chaos.platforms.kubernetes import manifests as m
    sys.stdout.write(m.to_yaml(jobs.render(job_from(args), settings_from(args))))
    return 0


def job_from(args: argparse.Namespace) -> Any:
    from elastic_chaos.spec import JobSpec, RdzvBackend, RendezvousSpec
    extra = {"run_id": args.run_id} if args.run_id else {}
    return JobSpec(nodes=args.nodes, nproc_per_node=args.nproc_per_node, max_restarts=args.max_restarts,
                   checkpoint_every=args.checkpoint_every, step_time=args.step_time,
                   rdzv=RendezvousSpec(backend=RdzvBackend(args.rdzv_backend)), **extra)


def settings_from(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from elastic_chaos.platforms.kubernetes import manifests as m
    from elastic_chaos.platforms.kubernetes.options import parse_pairs, parse_toleration
    kw: dict[str, Any] = {"namespace": args.namespace, "job_kind": m.JobKind(args.job_kind)}
    for name in ("image", "gpus_per_node", "efa_per_node", "cpu", "memory", "shm_size"):
        if getattr(args, name) is not None:
            kw[name] = getattr(args, name)
    if args.toleration:
        kw["tolerations"] = tuple(parse_toleration(t) for t in args.toleration)
    if args.node_selector:
        kw["node_selector"] = parse_pairs(args.node_selector, "--node-selector")
    if args.preset == "eks-gpu":
        if not args.image or not args.gpus_per_node:
            raise SpecError("--preset eks-gpu needs --image (your registry's trainer image) and --gpus-per-node")
        settings = m.eks_gpu_settings(image=args.image, gpus_per_node=args.gpus_per_node,
                                      storage_class=args.storage_class or "efs-sc")
    else:
        settings = m.kind_settings() if args.platform == "kind" else m.KubeSettings()
    storage = settings.storage
    if args.storage_class:
        storage = replace(storage, kind=m.StorageKind.PVC, storage_class=args.storage_class)
    if args.existing_claim:
        storage = replace(storage, kind=m.StorageKind.PVC, existing_claim=args.existing_claim)
    return replace(settings, storage=storage, **kw)
