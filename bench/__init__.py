"""elastic-chaos benchmarks: `make bench` (full) and `make bench-quick` (< 5 min).

Figures, not pass/fail: where recovery time goes and how close it is to the
floor, how far the local platform scales, what the watchers cost, and how
far the toolkit's figures are from ground truth stamped at the source. Every
comparison is a ratio measured in the same run (the machine is shared).
"""
