"""torch is not a dependency: a local run checks the nodes' interpreter has one, and says how to
install a CPU build when it has not (elastic_chaos.platforms.local.torch_check)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from elastic_chaos.errors import SetupError
from elastic_chaos.platforms.local.torch_check import CPU_INSTALL, require_torch, too_old, torch_version


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real interpreter without torch: a fresh virtualenv (no pip, no packages)."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return str(venv / "bin" / "python")


def test_this_interpreter_has_its_torch_found_without_importing_it():
    import importlib.metadata
    before = "torch" in sys.modules
    assert torch_version() == importlib.metadata.version("torch")
    assert ("torch" in sys.modules) == before


def test_another_interpreter_is_asked_in_a_subprocess_and_gives_the_same_answer(tmp_path):
    wrapper = tmp_path / "python"  # this interpreter under another name: the subprocess path
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    assert torch_version(str(wrapper)) == torch_version() is not None


def test_an_interpreter_without_torch_is_a_setup_error_that_says_how_to_install_a_cpu_build(bare_python):
    assert torch_version(bare_python) is None
    with pytest.raises(SetupError, match="torch is not installed") as err:
        require_torch(bare_python)
    assert CPU_INSTALL in str(err.value) and "never installs or replaces torch" in str(err.value)


def test_an_interpreter_that_cannot_run_is_a_setup_error(tmp_path):
    with pytest.raises(SetupError, match="could not ask"):
        torch_version(str(tmp_path / "no-python"))


@pytest.mark.parametrize(("version", "old"), [("2.1.2+cu121", True), ("1.13.1", True), ("2.2.0", False),
                                              ("2.13.0+cpu", False), ("3.0.0", False), ("unknown", False)])
def test_versions_older_than_the_tested_minimum_are_refused(version, old):
    assert too_old(version) is old


def test_the_installed_torch_is_accepted():
    assert require_torch() == torch_version()
