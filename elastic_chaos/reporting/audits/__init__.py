"""What a reader of many runs gets: ``elastic-chaos audit`` aggregates report folders (audit,
audit_view), per replayed trace (replay_audit), and gates CI on the figures (gates)."""
