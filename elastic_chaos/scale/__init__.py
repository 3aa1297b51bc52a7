"""Rendezvous at scale, the answer the toolkit ships: what a job of N nodes should expect from its rendezvous.

:mod:`~elastic_chaos.scale.figures` is the measured figures as one typed value (``measured.json``, package data,
written by ``python -m bench --scale-rdzv``); :mod:`~elastic_chaos.scale.model` fits a figure over N;
:mod:`~elastic_chaos.scale.expect` turns the figures into what a job of a given size and settings should expect
(``elastic-chaos scale``). Pure: nothing here measures, and nothing imports torch.

The measuring is a lab that only the benchmarks drive, and it is not shipped: bench/rdzv (torch's own
agent loop and rendezvous handler in hollow agents, many per process, under time dilation).
"""
