"""Game days on a real cluster: safety (opt-in, dry run, blast radius, stop conditions,
audit, cleanup journal), the run itself, and the replacement split it reports."""
