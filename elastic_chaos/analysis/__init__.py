"""What a fault cost, from the timeline alone: recovery metrics (declared in ``recovery``,
measured by ``recovery_analysis``), how the job ended (``outcome``), exactly-once sample
accounting (``samples``), the invariants every run must keep (``invariants``) and what could
be seen of a user's script (``observation``). Nothing here starts, stops or touches a job."""
