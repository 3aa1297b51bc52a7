"""The job on a Kubernetes cluster (``platform``; ``kind`` for kind clusters): manifests,
watches, pod logs, API actions, scaling, and finding a running job's rendezvous
(``discover``). The kubernetes client is imported only where a client is built."""
