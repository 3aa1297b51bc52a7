"""The wheel and sdist names the docs tell users to install carry the version pyproject.toml builds: the
docs said elastic_chaos-0.1.0 for a 0.2.0 package (a `pip install` of that path fails)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_file_the_docs_name_has_the_version_make_dist_builds():
    found = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)   # 3.10: no tomllib
    assert found is not None
    version = found.group(1)
    named = [(path.relative_to(ROOT), m.group(1))
             for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
             for m in re.finditer(r"elastic_chaos-(\d+\.\d+\.\d+)", path.read_text(encoding="utf-8"))]
    assert named, "the docs name no wheel any more: this test checks nothing"
    assert [n for n in named if n[1] != version] == []
