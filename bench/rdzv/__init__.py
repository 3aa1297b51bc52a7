"""The rendezvous lab: torch's own rendezvous handlers for hundreds to thousands of nodes, on one machine.

A job's recovery at scale is a question of torch's dynamic rendezvous, not of training processes. The lab
measures it and writes the figures `elastic-chaos scale` ships (elastic_chaos/scale/measured.json); it is the
benchmarks' (`python -m bench --scale-rdzv`, part of `make bench`), not the toolkit's: it runs torch's code
under test, so it imports torch, and the installed wheel does not carry it. docs/SCALE.md describes it.

- the harness: :mod:`~bench.rdzv.hollow` runs torch's agent loop and handler without workers, many per
  process (:mod:`~bench.rdzv.host`); :mod:`~bench.rdzv.harness` starts the store and the processes
  (:mod:`~bench.rdzv.pipe`) and reads what this machine spent (:mod:`~bench.rdzv.cpu`);
  :mod:`~bench.rdzv.clock` and :mod:`~bench.rdzv.throttle` are time dilation (more agents than cores);
- one size: :mod:`~bench.rdzv.episodes` measures formation, re-formation after losses and joins, store
  traffic and CPU, into :mod:`~bench.rdzv.records`;
- the sweep over sizes: :mod:`~bench.rdzv.plan` (dilation and episodes per size), :mod:`~bench.rdzv.sweep`,
  :mod:`~bench.rdzv.validate` (against real torchrun), :mod:`~bench.rdzv.measure` (into results.json's
  section, :mod:`~bench.rdzv.section`), :mod:`~bench.rdzv.shipped` (the figures the toolkit ships),
  :mod:`~bench.rdzv.findings` (in prose); RESULTS.md's section is bench/render/rdzv.py;
- commands: ``python -m bench.rdzv.probe`` (one size, another preset or arrivals) and
  ``python -m bench.rdzv.sizes`` (chosen sizes, one JSON each: another machine's cores, large_sizes.sh).
"""
