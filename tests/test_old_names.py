"""0.2 installs only ``elastic_chaos``; the 0.1 names ``chaos`` and ``trainer`` still import for a
release, with a FutureWarning naming the new one, and a repository's own ``trainer.py`` always wins.

Each case runs in a fresh interpreter outside the clone (the repository root is not on its path):
what a user's environment sees."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from elastic_chaos import _compat

ROOT = Path(__file__).resolve().parents[1]


def python(code: str, cwd: Path, *, pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run([sys.executable, "-W", "default::FutureWarning", "-c", code], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_two_line_integration_works_beside_a_repositorys_own_trainer_py(tmp_path: Path) -> None:
    (tmp_path / "trainer.py").write_text("WHOSE = 'the user'\n")
    out = python("import trainer; from elastic_chaos.trainer import progress; "
                 "print(trainer.WHOSE, progress.__name__)", tmp_path,
                 pythonpath=_compat.pythonpath_with_shims(None))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["the", "user", "elastic_chaos.trainer.progress"]
    assert "FutureWarning" not in out.stderr


def test_the_old_trainer_name_is_the_new_module_with_a_warning_that_says_what_to_change(tmp_path: Path) -> None:
    out = python("from trainer import progress; import elastic_chaos.trainer.progress as p; "
                 "print(progress is p, progress.__spec__.name)", tmp_path,
                 pythonpath=_compat.pythonpath_with_shims(None))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "elastic_chaos.trainer.progress"]
    assert "`trainer` is now `elastic_chaos.trainer`" in out.stderr
    assert "from elastic_chaos.trainer import progress" in out.stderr


def test_the_old_toolkit_name_imports_its_modules_as_the_new_ones(tmp_path: Path) -> None:
    code = ("from elastic_chaos._compat import append_to_sys_path; append_to_sys_path(); "
            "from chaos.spec import JobSpec; import elastic_chaos.spec as s; import chaos; "
            "print(JobSpec is s.JobSpec, chaos.ChaosRun.__module__)")
    out = python(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "elastic_chaos.runner.run"]
    assert "`chaos` is now `elastic_chaos`" in out.stderr


def test_the_shims_never_shadow_another_installed_package(tmp_path: Path) -> None:
    (tmp_path / "site" / "trainer").mkdir(parents=True)
    (tmp_path / "site" / "trainer" / "__init__.py").write_text("WHOSE = 'coqui'\n")
    code = ("import os, sys; sys.path.insert(1, os.path.abspath('site')); "
            "from elastic_chaos import _compat; print(_compat.pythonpath_with_shims('x'))")
    out = python(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "x"    # a `trainer` is installed: the nodes' path is left as it was


@pytest.mark.slow
def test_the_wheel_installs_no_generic_top_level_name(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    [wheel] = tmp_path.glob("elastic_chaos-*.whl")
    tops = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith((".dist-info", ".data"))} == {"elastic_chaos"}
