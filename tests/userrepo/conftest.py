"""tests/userrepo/repo is a template of a user's repository, copied out and run by `make user-test`
(tests/userrepo/check.sh) with the toolkit installed from its wheel; the toolkit's own suite does
not collect its scenario."""
collect_ignore = ["repo"]
