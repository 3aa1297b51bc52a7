"""Reference elastic workload and the tiny reporting API any training script can use.

`elastic_chaos.trainer` imports nothing else of the toolkit: the only coupling between a training script and
the toolkit is the line format written by :mod:`elastic_chaos.trainer.progress`.
"""
