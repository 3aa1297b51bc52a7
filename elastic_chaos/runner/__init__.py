"""Sessions over one timeline: ``run`` drives a chaos run (start, steady state, inject,
wait, verdict, report); ``watch`` only observes a job someone else runs."""
