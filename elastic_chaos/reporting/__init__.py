"""Reports people read: report.html, summary.md, timeline.png, and audits across runs.

report.json and timeline.jsonl (elastic_chaos.analysis.result, elastic_chaos.events) are the
evidence; this package writes report.json from a run's typed result and turns a
report folder into pictures and prose. The renderings read only what is on
disk, so the same code renders a report at the end of a run and later, with
``elastic-chaos report DIR``, for a run that crashed half-way (the report then
says what is missing).

Top level, the report of one run: ``run_report`` (RunReport: the result, events and node logs),
``report`` (write report.json and the renderings), ``render`` (a folder -> its renderings),
``load`` (a report folder read back, tolerant of missing and partial files), ``schema`` (what
report.json may hold), ``record`` (a watch's recording).

- ``views/``   what a reader of one run gets: report.html (html, svg, png, series, excerpts),
  summary.md (markdown), the terminal's table (table), JUnit properties and a failed test's
  message (failure), metrics.prom (prometheus); text.py bounds what a node printed
- ``audits/``  what a reader of many runs gets: ``elastic-chaos audit`` (audit, audit_view),
  per replayed trace (replay_audit), CI gates (gates)

The result itself (report.json's typed form) is elastic_chaos.analysis.result; advice from the
measured phases is elastic_chaos.analysis.advice.
"""
from __future__ import annotations

from elastic_chaos.reporting.render import RenderResult, render_folder

__all__ = ["RenderResult", "render_folder"]
