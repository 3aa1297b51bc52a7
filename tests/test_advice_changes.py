"""The advice leads with a change the toolkit accepts: every suggested flag set is fed back through
`elastic-chaos run ... --dry-run` (every check a run makes, nothing started) and must pass."""
from __future__ import annotations

from pathlib import Path

import pytest

from elastic_chaos.analysis.advice.rendezvous import _retrain, advise
from elastic_chaos.cli.main import main
from elastic_chaos.reporting.load import load_run

RUNS = Path(__file__).parent / "fixtures" / "runs"


def _suggestions() -> list[tuple[str, tuple[str, ...]]]:
    out = []
    for folder in sorted(p for p in RUNS.iterdir() if p.is_dir()):
        run = load_run(folder)
        out += [(f"{folder.name}:{f.phase}", f.change) for f in advise(run) if f.change]
        for i, fault in enumerate(run.faults):   # checkpoint_every: under the share rule in these runs
            f = _retrain(run, i, fault)
            if f is not None and f.change:
                out.append((f"{folder.name}:retrain", f.change))
    return out


SUGGESTIONS = _suggestions()


def test_the_recorded_runs_suggest_every_kind_of_change():
    flags = {c[0] for _, c in SUGGESTIONS}
    assert {"--rdzv-preset", "--keep-alive-interval", "--last-call-timeout", "--pg-timeout",
            "--nccl-dump-wait-ms", "--rdzv-backend", "--checkpoint-every"} <= flags, flags


@pytest.mark.parametrize(("where", "change"), SUGGESTIONS, ids=[w for w, _ in SUGGESTIONS])
def test_each_suggested_change_is_accepted_by_run(where, change, tmp_path, capsys):
    rc = main(["run", "kill-node", *change, "--dry-run", "--report-dir", str(tmp_path / "r")])
    out = capsys.readouterr()
    assert rc == 0, f"{where}: {' '.join(change)} refused: {out.err or out.out}"
    assert not (tmp_path / "r" / "report.json").exists()


def test_a_keep_alive_suggestion_is_whole_seconds_and_never_fewer_attempts_than_the_fast_preset():
    from elastic_chaos.analysis.advice.rendezvous import _shorter_expiry
    from elastic_chaos.spec import JobSpec, RendezvousSpec

    job = JobSpec(rdzv=RendezvousSpec(keep_alive_interval=3, keep_alive_max_attempt=1))
    change, _, saved, _ = _shorter_expiry(job, 3.0, 1.0, cost=3.0)    # expiry 3 s < the preset's 4 s
    assert change == ("--keep-alive-interval", "1") and saved == pytest.approx(2.0)
    change, _, _, why = _shorter_expiry(job, 1.0, 4.0, cost=4.0)
    assert change == () and "shortest expiry" in why


def test_the_report_leads_each_finding_with_its_change(tmp_path):
    import shutil

    from elastic_chaos.reporting import render_folder
    shutil.copytree(RUNS / "kill-node-shrink", tmp_path / "run")
    render_folder(tmp_path / "run", png=False)
    md = (tmp_path / "run" / "summary.md").read_text()
    assert "**Change: --last-call-timeout 5 (by hand: --rdzv-conf last_call_timeout=5); would have saved about" in md
    page = (tmp_path / "run" / "report.html").read_text()
    assert '<div class="change">Change: --rdzv-preset fast' in page
