"""What a reader of one run gets, each from the run's one result: report.html (html, svg, png,
series, excerpts), summary.md (markdown), the terminal's table (table), JUnit properties and a
failed test's message (failure), metrics.prom (prometheus); text.py escapes and bounds what a
node printed before any of them shows it."""
