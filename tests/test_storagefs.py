"""The storage mount serves a folder faithfully, and each fault rule does what it says.

Real FUSE mounts (root and /dev/fuse; skipped with the reason elsewhere, a failure
under CI=true). Timing assertions are lower bounds and orderings only: the machine
may be loaded.
"""
from __future__ import annotations

import errno
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from storagefs_helpers import mounted, require_fuse, storage_mount, within

from elastic_chaos.storagefs import (
    CrashPoint,
    Errors,
    Hang,
    Kind,
    Latency,
    NoSpace,
    OpRecord,
    ReadOnly,
    SavePoint,
    StorageFs,
    Throttle,
    save_stats,
    saves,
)
from elastic_chaos.storagefs.errors import MountError, RuleError
from elastic_chaos.storagefs.rules import from_json, to_json


@pytest.fixture
def folder(tmp_path) -> Path:
    path = tmp_path / "ckpt"
    path.mkdir()
    return path


@pytest.fixture
def fs(folder, tmp_path) -> Iterator[StorageFs]:
    """A live storage mount over ``folder`` (serving its own files), unmounted afterwards."""
    with storage_mount(folder, tmp_path / "storage") as storage:
        yield storage


def state() -> dict[str, torch.Tensor | int]:
    return {"w": torch.arange(1 << 20, dtype=torch.float32).reshape(1024, 1024), "step": 7}  # 4 MiB


def save_like_the_trainer(folder: Path, name: str = "ckpt.pt") -> Path:
    """Temporary file, fsync, rename into place, fsync the folder (elastic_chaos/trainer/checkpoint.py)."""
    tmp = folder / f".{name}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(state(), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / name)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return folder / name


def write_bytes(path: Path, n: int, chunk: int = 256 * 1024) -> None:
    with open(path, "wb", buffering=0) as f:
        for _ in range(n // chunk):
            f.write(b"x" * chunk)


# -- a faithful passthrough ---------------------------------------------------------------
def released(fs: StorageFs, path: str) -> OpRecord:
    """The release line of ``path``'s handle (the kernel sends RELEASE after close returns)."""
    assert within(lambda: any(r.op == "release" and r.path == path for r in fs.ops()), 10.0)
    return next(r for r in fs.ops() if r.op == "release" and r.path == path)


def test_a_save_goes_through_the_kernel_path_and_loads_back(fs, folder):
    (folder / "before.txt").write_text("old")  # through the mount; visible in the op log
    path = save_like_the_trainer(folder)
    loaded = torch.load(path)
    assert torch.equal(loaded["w"], state()["w"]) and loaded["step"] == 7
    torch.save(state(), folder / "direct.pt")  # torch's own C++ writer, by path
    assert torch.equal(torch.load(folder / "direct.pt")["w"], state()["w"])
    ops = [(r.op, r.path) for r in fs.ops()]
    assert ("create", f".ckpt.pt.tmp.{os.getpid()}") in ops and ("create", "direct.pt") in ops
    assert ("rename", f".ckpt.pt.tmp.{os.getpid()}") in ops and ("fsyncdir", "") in ops


def test_files_from_before_the_mount_are_served_and_new_ones_stay_after_it(folder, tmp_path):
    require_fuse()
    (folder / "old.pt").write_bytes(b"before")
    with StorageFs(folder, workdir=tmp_path / "s") as fs:
        assert mounted(folder)
        assert (folder / "old.pt").read_bytes() == b"before"
        (folder / "new.pt").write_bytes(b"during")
        assert fs.daemon_pid is not None
    assert not mounted(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["new.pt", "old.pt"]
    assert (folder / "new.pt").read_bytes() == b"during"


def test_posix_operations_behave_as_on_the_plain_folder(fs, folder):
    np.save(folder / "a.npy", np.arange(100))
    assert np.load(folder / "a.npy").tolist() == list(range(100))
    shutil.copy(folder / "a.npy", folder / "b.npy")
    assert (folder / "b.npy").read_bytes() == (folder / "a.npy").read_bytes()
    os.mkdir(folder / "sub")
    os.symlink("../a.npy", folder / "sub" / "link")
    assert os.readlink(folder / "sub" / "link") == "../a.npy"
    assert np.load(folder / "sub" / "link").sum() == 4950
    os.link(folder / "a.npy", folder / "hard.npy")
    assert os.stat(folder / "hard.npy").st_nlink == 2
    os.chmod(folder / "b.npy", 0o640)
    os.utime(folder / "b.npy", ns=(1_000_000_000, 2_000_000_123))
    st = os.stat(folder / "b.npy")
    assert (st.st_mode & 0o777, st.st_atime_ns, st.st_mtime_ns) == (0o640, 1_000_000_000, 2_000_000_123)
    os.truncate(folder / "b.npy", 3)
    assert os.stat(folder / "b.npy").st_size == 3
    (folder / "c").write_text("new")
    os.replace(folder / "c", folder / "b.npy")  # a rename that replaces
    assert (folder / "b.npy").read_text() == "new"
    with pytest.raises(FileExistsError):
        os.open(folder / "b.npy", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    with pytest.raises(OSError) as full:
        os.rmdir(folder / "sub")
    assert full.value.errno == errno.ENOTEMPTY
    os.unlink(folder / "sub" / "link")
    os.rmdir(folder / "sub")
    assert sorted(os.listdir(folder)) == ["a.npy", "b.npy", "hard.npy"]
    assert os.statvfs(folder).f_bsize > 0
    with open(folder / "a.npy", "r+b") as f:
        f.seek(0, os.SEEK_END)
        f.write(b"tail")
        f.flush()
        os.fdatasync(f.fileno())
    assert (folder / "a.npy").read_bytes().endswith(b"tail")


def test_files_made_for_another_user_belong_to_that_user(tmp_path):
    require_fuse()
    folder = Path(tempfile.mkdtemp(prefix="storagefs-shared-"))  # tmp_path's parents are private to root
    try:
        with StorageFs(folder, workdir=tmp_path / "s"):
            os.chmod(folder, 0o777)
            code = "import os, sys; os.setgid(65534); os.setuid(65534); open(sys.argv[1], 'w').write('x')"
            subprocess.run([sys.executable, "-c", code, str(folder / "theirs")], check=True, timeout=30)
            st = os.stat(folder / "theirs")
            assert (st.st_uid, st.st_gid) == (65534, 65534)
    finally:
        shutil.rmtree(folder)


# -- rules ----------------------------------------------------------------------------------
def test_latency_slows_only_the_ops_it_names(fs, folder):
    fs.set_rule(Latency(0.3, ops=frozenset({Kind.FSYNC})), name="slow-fsync")
    with open(folder / "f", "wb") as f:
        started = time.monotonic()
        f.write(b"x" * 4096)
        f.flush()
        synced = time.monotonic()
        os.fsync(f.fileno())
        done = time.monotonic()
    assert done - synced >= 0.3
    assert synced - started < done - synced  # the write was not delayed
    fsync = next(r for r in fs.ops() if r.op == "fsync")
    assert fsync.rule == "slow-fsync" and (fsync.stalled_s or 0) >= 0.3
    assert fs.clear_rule("slow-fsync") == ["slow-fsync"] and fs.clear_rule("slow-fsync") == []


def test_a_throughput_cap_paces_writes(fs, folder):
    fs.set_rule(Throttle(4_000_000))
    started = time.monotonic()
    write_bytes(folder / "capped", 3 * 1024 * 1024)  # 12 writes of 256 KiB at 4 MB/s
    assert time.monotonic() - started >= 11 * 262_144 / 4e6  # the last starts when 11 have had their time
    release = released(fs, "capped")
    assert release.bytes == 3 * 1024 * 1024 and (release.stalled_s or 0) > 0 and release.rule == "throttle-1"


def test_a_hang_blocks_until_cleared_then_the_op_completes(fs, folder):
    name = fs.set_rule(Hang(path="stuck*"))
    done: list[float] = []
    writer = threading.Thread(target=lambda: ((folder / "stuck.pt").write_bytes(b"payload"),
                                              done.append(time.monotonic())))
    (folder / "free.pt").write_bytes(b"ok")  # outside the pattern: not held
    writer.start()
    time.sleep(0.6)
    assert not done
    cleared = time.monotonic()
    fs.clear_rule(name)
    writer.join(10)
    assert done and done[0] >= cleared
    assert (folder / "stuck.pt").read_bytes() == b"payload"
    assert any(r.rule == name and (r.stalled_s or 0) >= 0.5 for r in fs.ops())


def test_a_hang_for_some_seconds_ends_by_itself(fs, folder):
    fs.set_rule(Hang(seconds=0.5, ops=frozenset({Kind.CREATE})))
    started = time.monotonic()
    (folder / "late").write_text("x")
    assert time.monotonic() - started >= 0.45
    assert fs.rules() == {}
    assert any(r.op == "rule-expired" for r in fs.ops())


def enospc_in(exc: BaseException | None) -> bool:
    """Whether ``exc`` or what it was raised while handling is ENOSPC (torch's zip writer
    turns a failed write into a RuntimeError on its way out)."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def failed_save(how: str, path: Path) -> BaseException:
    """The exception a torch.save to ``path`` raised, its tracebacks dropped so that torch's
    writer (and the file it holds open) is collected now."""
    try:
        if how == "path":
            torch.save(state(), path)  # torch's C++ writer
        else:
            with open(path, "wb") as f:  # as the reference trainer saves
                torch.save(state(), f)
    except Exception as exc:  # noqa: BLE001 - what it is, is the question
        link: BaseException | None = exc
        while link is not None:
            link.__traceback__ = None
            link = link.__cause__ or link.__context__
        gc.collect()
        return exc
    pytest.fail(f"torch.save ({how}) did not fail")


@pytest.mark.parametrize("how", ["file object", "path"])
def test_a_full_volume_breaks_torch_save_as_a_real_full_tmpfs_does(fs, folder, tmp_path, how):
    real = tmp_path / "tmpfs"
    real.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(real)], check=True, timeout=30)
    try:
        on_tmpfs = failed_save(how, real / "a.pt")
        tmpfs_size = os.stat(real / "a.pt").st_size
    finally:
        subprocess.run(["umount", str(real)], check=True, timeout=30)
    fs.set_rule(NoSpace(after_bytes=1024 * 1024), name="full")
    on_mount = failed_save(how, folder / "a.pt")
    assert type(on_mount) is type(on_tmpfs)
    assert enospc_in(on_mount) == enospc_in(on_tmpfs)
    assert os.stat(folder / "a.pt").st_size == tmpfs_size == 1024 * 1024  # the short write, then nothing
    injected = [r for r in fs.ops() if r.error == "ENOSPC"]
    assert injected and all(r.injected and r.rule == "full" for r in injected)


def test_a_save_fails_with_enospc_and_succeeds_once_the_rule_is_cleared(fs, folder):
    fs.set_rule(NoSpace(after_bytes=1_000_000), name="full")
    with pytest.raises(Exception) as failed:
        save_like_the_trainer(folder)
    assert enospc_in(failed.value)
    assert not (folder / "ckpt.pt").exists()
    fs.clear_rule("full")
    assert torch.equal(torch.load(save_like_the_trainer(folder))["w"], state()["w"])


def test_no_space_at_once_fails_the_first_write(fs, folder):
    fs.set_rule(NoSpace())
    with pytest.raises(OSError) as failed:
        write_bytes(folder / "x", 256 * 1024)
    assert failed.value.errno == errno.ENOSPC


def test_eio_on_a_count_of_ops_then_normal_again(fs, folder):
    fs.set_rule(Errors(count=2, ops=frozenset({Kind.FSYNC})), name="bad-disk")
    results = []
    with open(folder / "f", "wb") as f:
        f.write(b"data")
        for _ in range(3):
            try:
                os.fsync(f.fileno())
                results.append("ok")
            except OSError as exc:
                results.append(errno.errorcode[exc.errno or 0])
    assert results == ["EIO", "EIO", "ok"]
    assert [r.error for r in fs.ops() if r.op == "fsync"] == ["EIO", "EIO", None]
    assert "bad-disk" not in fs.rules()


def test_eio_on_a_fraction_is_seeded(fs, folder):
    def pattern() -> list[bool]:
        fs.set_rule(Errors(fraction=0.5, seed=11, ops=frozenset({Kind.WRITE})), name="flaky")
        hits = []
        with open(folder / "f", "wb", buffering=0) as f:
            for _ in range(40):
                try:
                    f.write(b"x")
                    hits.append(False)
                except OSError as exc:
                    assert exc.errno == errno.EIO
                    hits.append(True)
        fs.clear_rule("flaky")
        return hits

    first = pattern()
    assert 5 <= sum(first) <= 35
    assert pattern() == first


def test_read_only_refuses_every_mutation_and_still_serves_reads(fs, folder):
    (folder / "kept.pt").write_bytes(b"checkpoint")
    os.mkdir(folder / "d")
    fs.set_rule(ReadOnly())
    attempts = {"create": lambda: open(folder / "new", "w"),
                "open for writing": lambda: open(folder / "kept.pt", "r+b"),
                "unlink": lambda: os.unlink(folder / "kept.pt"),
                "rename": lambda: os.rename(folder / "kept.pt", folder / "x"),
                "mkdir": lambda: os.mkdir(folder / "e"), "rmdir": lambda: os.rmdir(folder / "d"),
                "chmod": lambda: os.chmod(folder / "kept.pt", 0o600)}
    for what, attempt in attempts.items():
        with pytest.raises(OSError) as refused:
            attempt()
        assert refused.value.errno == errno.EROFS, what
    assert (folder / "kept.pt").read_bytes() == b"checkpoint"
    assert sorted(os.listdir(folder)) == ["d", "kept.pt"]


def test_a_path_pattern_scopes_a_rule(fs, folder):
    os.mkdir(folder / "frozen")
    fs.set_rule(ReadOnly(path="frozen/*"))
    (folder / "free.txt").write_text("ok")
    with pytest.raises(OSError) as refused:
        (folder / "frozen" / "x.txt").write_text("no")
    assert refused.value.errno == errno.EROFS


def test_the_op_log_times_each_save(fs, folder):
    fs.set_rule(Latency(0.2, ops=frozenset({Kind.FSYNC})))
    save_like_the_trainer(folder, "a.pt")
    save_like_the_trainer(folder, "b.pt")
    released(fs, ".b.pt.tmp." + str(os.getpid()))
    found = saves(fs.ops())
    assert [(s.final, s.bytes > 4_000_000) for s in found] == [("a.pt", True), ("b.pt", True)]
    assert all(s.duration_s >= 0.2 and s.stalled_s >= 0.2 and s.pid == os.getpid() for s in found)
    stats = save_stats(fs.ops())
    assert stats is not None and stats.count == 2 and stats.p50_s <= stats.p95_s <= stats.max_s
    assert stats.stalled_s >= 0.4  # the two files' fsyncs (the folder's are not named by the rule)


# -- refusals -------------------------------------------------------------------------------
def test_rules_are_checked_before_they_are_sent():
    for bad in (lambda: Latency(-1), lambda: Throttle(0), lambda: Hang(seconds=0), lambda: Errors(),
                lambda: Errors(count=1, fraction=0.5), lambda: Errors(fraction=2.0), lambda: Errors(count=1, errno=-3),
                lambda: ReadOnly(path="/abs"), lambda: Latency(1, ops=frozenset())):
        with pytest.raises(RuleError):
            bad()
    with pytest.raises(RuleError, match="unknown field"):
        from_json({"kind": "latency", "delay_s": 1, "colour": "red"})
    with pytest.raises(RuleError, match="kind"):
        from_json({"kind": "meteor"})
    rule = CrashPoint(SavePoint.MID_WRITE, path="*.tmp*", after_bytes=10)
    assert from_json(to_json(rule)) == rule


def test_a_second_mount_over_the_same_folder_and_a_missing_folder_are_refused(fs, folder, tmp_path):
    with pytest.raises(MountError, match="already has a storage mount"):
        StorageFs(folder, workdir=tmp_path / "other").mount()
    with pytest.raises(MountError, match="not a folder"):
        StorageFs(tmp_path / "missing", workdir=tmp_path / "other").mount()
    with pytest.raises(MountError, match="inside the mount"):
        StorageFs(tmp_path, workdir=tmp_path / "logs").mount()


def test_unavailable_says_why_for_a_user_who_is_not_root(tmp_path):
    require_fuse()
    # imported as root first: this interpreter's standard library lies under /root
    code = ("import os; from elastic_chaos.storagefs import unavailable; "
            "os.setgid(65534); os.setuid(65534); print(unavailable())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/",
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert out.returncode == 0, out.stderr
    assert "needs root" in out.stdout and "uid 65534" in out.stdout
