"""Rendezvous at scale: torch's own rendezvous handlers for hundreds to thousands of nodes, on one machine.

A job's recovery at scale is a question of torch's dynamic rendezvous, not of training processes.
:mod:`~chaos.scale.hollow` runs torch's agent loop and handler without workers, many per process
(:mod:`~chaos.scale.host`); :mod:`~chaos.scale.harness` starts the store and the processes;
:mod:`~chaos.scale.episodes` measures formation, re-formation after losses and joins, store traffic
and CPU for one size; :mod:`~chaos.scale.model` fits the figures over N; :mod:`~chaos.scale.expect`
turns the shipped figures (``measured.json``, written by ``python -m bench --scale-rdzv``) into what
a job of a given size should expect (``elastic-chaos scale``).

Only ``expect``, ``model`` and ``figures`` are imported by the CLI: ``hollow`` and ``host`` import
torch and run in the harness' own processes.
"""
