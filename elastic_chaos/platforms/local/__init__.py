"""The embedded platform: a real etcd and real torchrun agents as nodes on this machine
(``platform``), with what makes a node a unit of failure: its processes (``procs``),
cgroup (``cgroup``), network namespace (``netns``, ``relay``), metadata stand-in
(``imds``) and the etcd server it starts (``etcd``)."""
