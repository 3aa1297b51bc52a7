"""report.html and audit.html open in a real headless Chromium: no console error,
nothing fetched from the network, the timeline laid out and visible, a screenshot taken.

Playwright (the ``test`` extra) drives Debian's chromium, which comes from the test
setup (`make browser-testenv`, run by .ci/run): skipped with the reason when either
is absent locally, a failure under CI=true.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from browser_page import find_chromium, open_page

from elastic_chaos.reporting import render_folder

RUNS = Path(__file__).parent / "fixtures" / "runs"

VISIBLE = """(() => {
  const svg = document.getElementById("timeline");
  if (!svg) { return null; }
  svg.scrollIntoView({block: "start"});
  const r = svg.getBoundingClientRect();
  return {x: r.x, y: r.y, width: r.width, height: r.height, vh: window.innerHeight,
          ready: document.documentElement.getAttribute("data-timeline"),
          series: svg.querySelectorAll("polyline.series").length,
          faults: svg.querySelectorAll("g.fault").length,
          verdict: document.querySelector("#verdict b").textContent};
})()"""


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's chromium, with Playwright to drive it; skips (fails under CI=true) without either."""
    path = find_chromium()
    missing = None if path else ("chromium is not installed; `make browser-testenv` installs it "
                                 "(apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing = "playwright is not installed; `pip install -e .[test]` (make install) installs it"
    if missing is None and path is not None:
        return path
    if os.environ.get("CI") == "true":
        pytest.fail(f"{missing} -- the test setup must provide it")
    pytest.skip(missing)


def colour_pixels(png: Path, box: dict[str, float], rgb: tuple[int, int, int], tol: int = 40) -> int:
    from PIL import Image
    with Image.open(png) as img:
        crop = img.convert("RGB").crop((int(box["x"]), max(0, int(box["y"])), int(box["x"] + box["width"]),
                                        int(min(box["y"] + box["height"], box["vh"]))))
        raw = crop.tobytes()
    return sum(1 for i in range(0, len(raw), 3)
               if abs(raw[i] - rgb[0]) <= tol and abs(raw[i + 1] - rgb[1]) <= tol and abs(raw[i + 2] - rgb[2]) <= tol)


@pytest.mark.parametrize("name", ["kill-node-replaced", "crashed-mid-recovery"])
def test_report_html_opens_cleanly_with_the_timeline_visible(chromium, tmp_path, name):
    folder = tmp_path / name
    shutil.copytree(RUNS / name, folder)
    html = render_folder(folder, png=False).html
    shot = tmp_path / f"{name}.png"
    page = open_page(chromium, html, screenshot=shot, expression=VISIBLE)
    assert page.console_errors == []
    assert page.requests == [], "the report must not fetch anything"
    box = page.value
    assert box is not None and box["ready"] == "ready"        # the page's script ran to its end
    assert box["width"] >= 1000 and box["height"] >= 300
    assert -1 <= box["y"] < box["vh"] - 200                   # scrolled into the viewport
    assert box["series"] >= 2 and box["faults"] == 1
    assert box["verdict"] == ("PASSED" if name == "kill-node-replaced" else "NO VERDICT")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert colour_pixels(shot, box, (0xD6, 0x27, 0x28)) > 100   # the red fault line is drawn
    assert colour_pixels(shot, box, (0x1F, 0x77, 0xB4)) > 50    # node-0 trained: its step line


def test_audit_html_opens_cleanly(chromium, tmp_path):
    for name in ("kill-node-replaced", "kill-node-shrink", "kill-node-c10d"):
        shutil.copytree(RUNS / name, tmp_path / "runs" / name)
    out = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "audit", str(tmp_path / "runs"),
                          "--html", str(tmp_path / "audit.html")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    page = open_page(chromium, tmp_path / "audit.html", screenshot=tmp_path / "audit.png",
                     expression='document.querySelectorAll("#audit-phases rect").length')
    assert page.console_errors == [] and page.requests == []
    assert page.value >= 4 + 4                                # 4 phase bars + 4 legend swatches


SHOTS = Path(__file__).resolve().parent.parent / "reports" / "browser"
"""Where the screenshots a person can look at go (git-ignored; printed by the test)."""

WHAT_IT_SAYS = """(() => {
  const svg = document.getElementById("timeline");
  const changes = [...document.querySelectorAll("#advice .change")];
  return {changes: changes.map(c => c.textContent),
          shown: changes.filter(c => c.getBoundingClientRect().height > 0).length,
          legend: document.querySelector(".legend").textContent,
          bars: [...document.querySelectorAll("#phase-bars text.legend-item")].map(t => t.textContent),
          labels: [...svg.querySelectorAll("text.node-mark-label")].map(t => t.textContent),
          explained: document.querySelector(".explain") ? document.querySelector(".explain").textContent : null,
          pauses: svg.querySelectorAll("g.pause").length};
})()"""


def test_the_report_says_what_to_change_and_labels_what_it_draws(chromium, tmp_path, capsys):
    """Issue 24's report, in a real browser: each finding leads with a change to paste, the legends
    show only what occurs, spot notices are labelled on their node's lane, goodput is explained, a
    pause is a band (not a world of 0). The screenshot is kept in reports/browser/ for a person."""
    folder = tmp_path / "spot-interruption"
    shutil.copytree(RUNS / "spot-interruption", folder)
    html = render_folder(folder, png=False).html
    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = SHOTS / "spot-interruption.png"
    page = open_page(chromium, html, screenshot=shot, expression=WHAT_IT_SAYS, height=2600)
    assert page.console_errors == [] and page.requests == []
    seen = page.value
    assert seen["changes"] and seen["shown"] == len(seen["changes"])
    assert seen["changes"][0].startswith("Change: --rdzv-preset fast")
    assert "would have saved about" in seen["changes"][0]
    assert "rendezvous" in seen["legend"] and "stall" not in seen["legend"] and "shutdown" not in seen["legend"]
    assert seen["bars"] == ["detect", "exit", "rendezvous", "restart"]      # 0.0 s retrain: did not occur
    assert seen["labels"] == ["notice: rebalance, interruption"]
    assert seen["explained"] and "committed steps" in seen["explained"]
    assert seen["pauses"] >= 1
    with capsys.disabled():
        print(f"\nscreenshot to look at: {shot}")
