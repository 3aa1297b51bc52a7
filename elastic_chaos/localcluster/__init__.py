"""A real multi-node Kubernetes cluster on this machine, without Docker or a registry (docs/LOCAL-CLUSTER.md).

Stdlib only: ``python3 -m elastic_chaos.localcluster up`` (what ``make
cluster-up`` runs) works as root under any Python 3.11, without the toolkit's
dependencies. :mod:`ops` holds the operations (up, down, add-node, lose-node,
partition, heal); :mod:`elastic_chaos.platforms.kubernetes.machines` is how the
Kubernetes platform's node faults and node pool reach them.
"""
