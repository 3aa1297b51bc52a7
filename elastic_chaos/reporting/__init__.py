"""Reports people read: report.html, summary.md, timeline.png, and audits across runs.

report.json and timeline.jsonl (elastic_chaos.analysis.result, elastic_chaos.events) are the
evidence; this package writes report.json from a run's typed result and turns a
report folder into pictures and prose. The renderings read only what is on
disk, so the same code renders a report at the end of a run and later, with
``elastic-chaos report DIR``, for a run that crashed half-way (the report then
says what is missing).

- ``result``    RunResult: what report.json holds, typed (to_json / from_json)
- ``report``    write report.json from a RunResult; the terminal recovery table
- ``table``     the recovery table's columns, from the metric declarations
- ``load``      a report folder -> RunData (tolerant of missing/partial files)
- ``series``    RunData -> what the timeline picture draws
- ``svg``       the timeline picture and phase bars as inline SVG
- ``html``      report.html (one self-contained file)
- ``markdown``  summary.md
- ``png``       timeline.png (matplotlib, optional extra)
- ``advice``    tuning advice from the measured phases and rendezvous states
- ``excerpts``  node/agent log lines around each fault
- ``audit``     many runs -> per fault kind and platform percentiles and a score
"""
from __future__ import annotations

from elastic_chaos.reporting.render import RenderResult, render_folder

__all__ = ["RenderResult", "render_folder"]
