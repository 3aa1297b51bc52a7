"""Host machinery the rooms above share: processes, namespaces and servers on this machine.

The etcd server and its v2 client (etcd.py, etcd_v2.py), the lifeline that ends a run's
processes with the runner (lifeline.py), the registry of live runs and the reaper of dead
ones (registry.py, watchdog.py), process identity by PID and start time (procs.py), a
node's cgroup (cgroup.py) and network namespace (netns.py). The local platform builds its
nodes from these; the Kubernetes reaper, the rendezvous bench and the CLI's `reap` use them
without reaching into a platform adapter.
"""
