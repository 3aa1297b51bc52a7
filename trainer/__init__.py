"""Reference elastic workload and the tiny reporting API any training script can use.

`trainer` never imports `chaos`: the only coupling between a training script and
the toolkit is the line format written by :mod:`trainer.progress`.
"""
