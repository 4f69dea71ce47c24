"""ingestwm's cache (``~/.cache/ingestwm``): bounded, listed, cleared, and nothing in use removed.

Every test points ``XDG_CACHE_HOME`` at its own directory: the user's cache is never touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import flink_venv
import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.validate import FlinkTiming, flink_java, run, user_cache
from bench.validate.user_cache import JOB, KEEP_JOBS, LEFTOVER, OTHER, PARTIAL, VENV, cache_root, entries


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("INGESTWM_FLINK_VENV", raising=False)
    r = cache_root()
    assert r == tmp_path / "xdg" / "ingestwm"
    r.mkdir(parents=True)
    return r


def _job(root: Path, n: int, used_s: float | None = None) -> Path:
    """A compiled job (its class file and ``ok``), last used at ``used_s`` (its lock's time)."""
    d = root / f"flink-java-{n:016x}"
    (d / "ingestwm" / "validate").mkdir(parents=True)
    (d / "ingestwm" / "validate" / "DrivenReplay.class").write_bytes(b"\xca\xfe" * 5000)
    (d / "ok").write_text("DrivenReplay.java\n")
    if used_s is not None:
        lock = root / f"{d.name}.lock"
        lock.touch()
        os.utime(lock, (used_s, used_s))
    return d


def _venv(root: Path, tag: str = "py311") -> Path:
    d = root / f"flink-2.3-{tag}"
    (d / "bin").mkdir(parents=True)
    (d / "bin" / "python").write_text("#!/bin/sh\necho flink python\n")
    (d / "bin" / "python").chmod(0o755)
    (d / "lib").mkdir()
    (d / "lib" / "pyflink.bin").write_bytes(b"x" * 300_000)
    (d / "ok").write_text("2.3.0\n")
    (root / f"{d.name}.log").write_text("+ pip install apache-flink\n")
    return d


IN_USE = "in use (a running validate or a build holds it)"
Holder = Callable[[Path], "subprocess.Popen[str]"]


@pytest.fixture
def holder(root: Path) -> Iterator[Holder]:
    """Another process that holds a cache entry as a running validate does, until stdin closes."""
    code = (
        "import sys\n"
        "from bench.validate import user_cache\n"
        "with user_cache.using_python(sys.argv[1]):\n"
        "    print('holding', flush=True)\n"
        "    sys.stdin.read()\n"
    )
    procs: list[subprocess.Popen[str]] = []

    def start(python: Path) -> subprocess.Popen[str]:
        p = subprocess.Popen(
            [sys.executable, "-c", code, str(python)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        procs.append(p)
        assert p.stdout is not None and p.stdout.readline().strip() == "holding"
        return p

    yield start
    for p in procs:
        if p.stdin is not None:
            p.stdin.close()
        p.wait(30)


# ---------------------------------------------------------------- listing
def test_entries_say_what_each_is_its_size_and_last_use_most_recent_first(root: Path) -> None:
    old, new = _job(root, 1, used_s=1_000_000), _job(root, 2, used_s=2_000_000)
    venv = _venv(root)
    partial = root / f"{old.name}.tmp-abc"
    partial.mkdir()
    (root / "flink-java-00000000000000ff.lock").touch()  # its job is gone
    (root / "notes.txt").write_text("mine")
    found = {e.name: e for e in entries(root)}
    assert found[new.name].kind == found[old.name].kind == JOB
    assert found[venv.name].kind == VENV and found[partial.name].kind == PARTIAL
    assert found["flink-java-00000000000000ff.lock"].kind == LEFTOVER
    assert found["notes.txt"].kind == OTHER
    assert f"{venv.name}.log" not in found and f"{old.name}.lock" not in found  # part of their entries
    assert found[old.name].last_used_s == 1_000_000 and found[new.name].last_used_s == 2_000_000
    assert found[new.name].size_bytes >= 10_000 and found[venv.name].size_bytes >= 300_000
    assert not any(e.in_use for e in found.values())
    names = [e.name for e in entries(root)]
    assert names.index(new.name) < names.index(old.name)


def test_an_absent_cache_is_empty(tmp_path: Path) -> None:
    assert entries(tmp_path / "nothing") == []


# ---------------------------------------------------------------- bounded
def test_pruning_keeps_the_most_recently_used_jobs_and_any_in_use(root: Path, holder: Holder) -> None:
    jobs = [_job(root, n, used_s=1_000_000 + n) for n in range(KEEP_JOBS + 3)]
    venv = _venv(root)
    (root / f"{jobs[0].name}.tmp-killed").mkdir()  # a compile killed midway
    holder(jobs[1] / "ok")  # a job a running validate holds ...
    os.utime(root / f"{jobs[1].name}.lock", (1_000_001, 1_000_001))  # ... since before the others' use
    report = user_cache.prune_jobs(root)
    left = {p.name for p in root.iterdir()}
    newest = {j.name for j in jobs[-KEEP_JOBS:]}
    assert newest <= left and jobs[1].name in left and venv.name in left
    assert {jobs[0].name, jobs[2].name, f"{jobs[0].name}.tmp-killed"}.isdisjoint(left)
    assert f"{jobs[0].name}.lock" not in left and f"{jobs[2].name}.lock" not in left
    assert [(e.name, why) for e, why in report.kept] == [(jobs[1].name, IN_USE)]
    assert report.freed_bytes > 0 and not report.failed


def test_a_compile_in_progress_is_never_pruned(root: Path) -> None:
    job = root / "flink-java-00000000000000aa"
    partial = root / f"{job.name}.tmp-now"
    partial.mkdir()
    with user_cache.using(job):  # compiled_job holds its target while it compiles
        report = user_cache.prune_jobs(root)
    assert partial.exists() and [why for _, why in report.kept] == ["being compiled"]


def test_compiled_job_compiles_once_holds_the_job_while_used_and_prunes_older_ones(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The javac step is replaced (the real compile: test_validate's flink tests); the rest is real."""
    old = [_job(root, n, used_s=1_000 + n) for n in range(KEEP_JOBS + 1)]
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "flink-dist-2.3.0.jar").write_bytes(b"jar")
    compiles: list[Path] = []

    def fake_compile(lib_: Path, jars: list[str], target: Path) -> None:
        compiles.append(target)
        target.mkdir()
        (target / "ok").write_text("compiled\n")

    monkeypatch.setattr(flink_java, "_compile", fake_compile)
    with flink_java.compiled_job(lib) as classes:
        assert classes.parent == root and (classes / "ok").exists()
        assert {e.name: e.in_use for e in entries(root)}[classes.name] is True
    with flink_java.compiled_job(lib) as again:
        assert again == classes
    assert compiles == [classes]  # once
    jobs = [e.name for e in entries(root) if e.kind == JOB]
    assert jobs[0] == classes.name and len(jobs) == KEEP_JOBS
    assert old[0].name not in jobs and old[1].name not in jobs


# ---------------------------------------------------------------- clear
def test_clear_removes_the_jobs_and_keeps_the_venv_unless_asked(root: Path) -> None:
    job, venv = _job(root, 1), _venv(root)
    (root / "notes.txt").write_text("mine")
    report = user_cache.clear(root)
    assert not job.exists() and venv.exists() and (root / "notes.txt").exists()
    assert {e.name for e in report.removed} == {job.name}
    kept = {e.name: why for e, why in report.kept}
    assert kept[venv.name] == "a Flink venv: removed only with --venv"
    report = user_cache.clear(root, venvs=True)
    assert not venv.exists() and not (root / f"{venv.name}.log").exists()
    assert [e.name for e in report.removed] == [venv.name] and (root / "notes.txt").exists()


def test_clear_never_removes_a_venv_a_running_validate_holds(root: Path, holder: Holder) -> None:
    venv = _venv(root)
    job = _job(root, 1)
    proc = holder(venv / "bin" / "python")
    report = user_cache.clear(root, venvs=True)
    assert venv.exists() and not job.exists()
    assert [(e.name, why) for e, why in report.kept] == [(venv.name, IN_USE)]
    assert {e.name: e.in_use for e in entries(root)}[venv.name] is True
    out = subprocess.run([str(venv / "bin" / "python")], capture_output=True, text=True, check=True)
    assert out.stdout == "flink python\n"  # still runs
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(30)
    assert [e.name for e in user_cache.clear(root, venvs=True).removed] == [venv.name]


def test_a_user_waiting_while_an_entry_is_removed_holds_the_new_lock(root: Path) -> None:
    """A validate that starts while a clear removes its entry waits, then holds the lock at the path
    (not the removed file): a second clear then sees it in use."""
    job = _job(root, 7)
    fd = user_cache._open_locked(job, exclusive=True, wait=False)  # a clear, midway
    assert fd is not None
    held = threading.Event()
    release = threading.Event()

    def user() -> None:
        with user_cache.using(job):
            held.set()
            release.wait(30)

    t = threading.Thread(target=user)
    t.start()
    assert not held.wait(0.3)  # waits for the clear
    user_cache._delete(job)
    user_cache._delete(root / f"{job.name}.lock")
    os.close(fd)
    assert held.wait(10)
    assert user_cache._in_use(job)  # the lock it holds is the one at the path
    assert user_cache._open_locked(job, exclusive=True, wait=False) is None
    release.set()
    t.join(10)
    assert not user_cache._in_use(job)


def test_validate_holds_a_flink_python_of_the_cache_from_start_to_end(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = _venv(root)
    seen: list[bool] = []

    def fake(*args: object) -> list[object]:
        seen.append({e.name: e.in_use for e in entries(root)}[venv.name])
        return []

    monkeypatch.setattr(run, "_validate", fake)
    python = str(venv / "bin" / "python")
    run.validate(["tiny"], ["flink"], lambda: None, FlinkTiming(), python)
    run.validate(["tiny"], ["spark"], lambda: None, FlinkTiming(), python)
    assert seen == [True, False]  # held for Flink; a Spark-only run does not need it
    assert not {e.name: e.in_use for e in entries(root)}[venv.name]


def test_the_test_suites_flink_venv_lives_in_the_cache(root: Path) -> None:
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    assert flink_venv.venv_dir() == root / f"flink-2.3-{tag}"


# ---------------------------------------------------------------- the command
def test_cache_info_shows_what_where_size_and_last_use(root: Path) -> None:
    job, venv = _job(root, 1, used_s=1_700_000_000), _venv(root)
    r = CliRunner().invoke(cli, ["cache", "info"])
    assert r.exit_code == 0, r.output
    assert f"cache: {root} (" in r.output and " in 2 entries)" in r.output
    job_line = next(line for line in r.output.splitlines() if line.endswith(str(job)))
    assert job_line.startswith("compiled Java job") and "KiB" in job_line
    assert "2023-11-14T22:13:20Z" in job_line
    assert any(line.startswith("Flink venv") and line.endswith(str(venv)) for line in r.output.splitlines())
    r = CliRunner().invoke(cli, ["cache", "info", "--json"])
    doc = json.loads(r.output)
    assert doc["root"] == str(root) and doc["keep_jobs"] == KEEP_JOBS
    by = {e["name"]: e for e in doc["entries"]}
    assert by[job.name]["kind"] == JOB and by[job.name]["last_used"] == "2023-11-14T22:13:20Z"
    assert by[venv.name]["size_bytes"] >= 300_000 and by[venv.name]["in_use"] is False
    assert doc["total_bytes"] == sum(e["size_bytes"] for e in doc["entries"])


def test_cache_clear_removes_jobs_and_with_venv_the_venvs(root: Path) -> None:
    job, venv = _job(root, 1), _venv(root)
    r = CliRunner().invoke(cli, ["cache", "clear"])
    assert r.exit_code == 0, r.output
    assert f"removed compiled Java job {job}" in r.output
    assert f"kept Flink venv {venv}" in r.output and "removed only with --venv" in r.output
    assert "freed " in r.output and not job.exists() and venv.exists()
    r = CliRunner().invoke(cli, ["cache", "clear", "--venv"])
    assert r.exit_code == 0 and f"removed Flink venv {venv}" in r.output and not venv.exists()
    r = CliRunner().invoke(cli, ["cache", "clear"])
    assert r.exit_code == 0 and "holds nothing to remove" in r.output
    r = CliRunner().invoke(cli, ["cache", "info"])
    assert r.exit_code == 0 and r.output.strip() == f"cache: {root} (empty)"


def test_cache_clear_names_what_it_could_not_remove_and_fails(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(root, 1)

    def refuse(path: Path) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(user_cache, "_delete", refuse)
    r = CliRunner().invoke(cli, ["cache", "clear"])
    assert r.exit_code == 1
    assert f"could not remove {job}: Permission denied" in r.output
    assert "1 cache entry could not be removed" in r.output and job.exists()
