"""Replay the lab's Flink splits through a Java Flink job whose processing time the replay drives.

The paced PyFlink replay (``flink_engine``/``flink_job``) lets Flink's processing-time timer
fire between wall-clock-paced bundles; it is slow and, when the pacing slips, ends ``out of
regime``. This one runs ``java/DrivenReplay.java`` (compiled on first use with ``javac -cp
'<flink>/lib/*'`` into a user cache directory keyed by the source's hash and Flink's version,
run with ``java -cp``; no Python operator): the same splits and steps as the paced replay
(``flink_engine.flink_spec``), but each step is a *turn* in the lab's global order (a tick's
releases, its finished splits' ends, then its periodic emits in slot order), and a periodic
emit is a *tick* record that sets the subtask's input-activity clock to the lab's tick time
and calls Flink's own ``forBoundedOutOfOrderness(bound).withIdleness(timeout)`` generator's
``onPeriodicEmit``. Turn ``n`` starts only once the late filter has taken turn ``n - 1``'s
marker, so its watermark went through Flink's valve first. Nothing depends on wall time: the
verdict is ``exact`` or ``differs`` (docs/engines.md).

Flink's jars come from ``$FLINK_HOME/lib`` or from the PyFlink of ``--flink-python`` (its
``pyflink/lib``); ``javac`` and ``java`` from ``JAVA_HOME/bin`` or ``PATH``.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..lab.compare import LabResult
from ..lab.lab_scenario import lab_strategies
from . import user_cache
from .errors import EngineRunError, EngineUnavailableError, ValidateError
from .flink_engine import FlinkReplay, FlinkTiming, flink_spec, parse_replay, run_job
from .flink_job import WAIT

__all__ = [
    "RUNNERS",
    "java_runner_unavailable",
    "flink_lib_dir",
    "compiled_job",
    "driven_spec",
    "replay_flink_java",
    "choose_runner",
]

RUNNERS = ("auto", "java", "python")
SOURCE = Path(__file__).resolve().parent / "java" / "DrivenReplay.java"
MAIN_CLASS = "ingestwm.validate.DrivenReplay"
FORMAT = "ingestwm-driven-replay 1"
TURN_TIMEOUT_MS = 120_000  # one turn's wait for the one before it, in the JVM: a stuck job fails, named
_NO_WATERMARK = -(2**62)  # at or below: still "none yet" (the verdict's rule)


def _tool(name: str) -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", name), os.X_OK):
        return os.path.join(home, "bin", name)
    return shutil.which(name)


def flink_lib_dir(python: str | None = None) -> Path | None:
    """Flink's jars: ``$FLINK_HOME/lib``, else the ``pyflink/lib`` of ``python``'s PyFlink (this one's
    if None); None if neither has ``flink-dist-*.jar``."""
    candidates: list[Path] = []
    home = os.environ.get("FLINK_HOME")
    if home:
        candidates.append(Path(home) / "lib")
    if python is None or python == sys.executable:
        import importlib.util

        spec = importlib.util.find_spec("pyflink")
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        candidates += [Path(loc) / "lib" for loc in locations]
    elif os.path.exists(python):
        ask = (
            "import importlib.util as u; s = u.find_spec('pyflink'); "
            "print('\\n'.join(s.submodule_search_locations or []) if s else '')"
        )
        try:
            out = subprocess.run([python, "-c", ask], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            out = None
        if out is not None and out.returncode == 0:
            candidates += [Path(line) / "lib" for line in out.stdout.splitlines() if line.strip()]
    for lib in candidates:
        if any(lib.glob("flink-dist*.jar")):
            return lib
    return None


def java_runner_unavailable(python: str | None = None) -> str | None:
    """None if the Java runner can run here, else why not (no javac, no java, no Flink jars)."""
    if _tool("javac") is None:
        return "no javac (a JDK on PATH or JAVA_HOME) for the Java Flink job"
    if _tool("java") is None:
        return "no Java runtime (java on PATH or JAVA_HOME) for Flink"
    if flink_lib_dir(python) is None:
        where = f"the PyFlink of {python}" if python else "this Python's PyFlink"
        return f"no Flink jars: neither $FLINK_HOME/lib nor {where} (pip install 'ingestwm[flink]')"
    return None


def choose_runner(runner: str, python: str | None = None) -> tuple[str, str | None]:
    """The runner to use and, if none can run, why: ``auto`` is ``java`` where it can run (a JDK and
    Flink's jars), else ``python`` (the paced PyFlink replay: a JRE is enough)."""
    if runner not in RUNNERS:
        raise ValidateError(f"no Flink runner {runner!r}; runners: {', '.join(RUNNERS)}")
    if runner == "python":
        return "python", None
    why = java_runner_unavailable(python)
    if runner == "java" or why is None:
        return "java", why
    return "python", None


@contextlib.contextmanager
def compiled_job(lib: Path) -> Iterator[Path]:
    """The compiled job's class directory, held (``user_cache.using``) while the block runs it:
    ``~/.cache/ingestwm/flink-java-<hash>``, the hash over the source and Flink's jars' names
    (another Flink or source: another directory), compiled on first use. A compile then prunes
    the jobs beyond the ``user_cache.KEEP_JOBS`` most recently used."""
    jars = sorted(p.name for p in lib.glob("*.jar"))
    key = hashlib.sha256(SOURCE.read_bytes() + "\n".join(jars).encode()).hexdigest()[:16]
    target = user_cache.cache_root() / f"flink-java-{key}"
    with user_cache.using(target):
        if not (target / "ok").exists():
            _compile(lib, jars, target)
            with contextlib.suppress(OSError, ValidateError):  # housekeeping: never fails the run
                user_cache.prune_jobs(target.parent)
        yield target


def _compile(lib: Path, jars: list[str], target: Path) -> None:
    """Compile into a temporary directory renamed into place, so concurrent runs never see half of it."""
    javac = _tool("javac")
    if javac is None:
        raise EngineUnavailableError("no javac (a JDK on PATH or JAVA_HOME) for the Java Flink job")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{target.name}.tmp-", dir=target.parent))
    try:
        cmd = [javac, "--release", "11", "-nowarn", "-cp", f"{lib}/*", "-d", str(work), str(SOURCE)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
            raise EngineRunError(f"javac could not compile {SOURCE.name} against {lib}:\n{tail}")
        (work / "ok").write_text(f"{SOURCE.name} against {', '.join(j for j in jars if 'dist' in j)}\n")
        try:
            work.rename(target)
        except OSError:  # another run put it there first
            if not (target / "ok").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def driven_spec(result: LabResult) -> dict[str, Any]:
    """The paced replay's splits and steps (``flink_spec``), each step a turn in the lab's order.

    Turns follow the steps' places in time (a tick's bundles and marks, then ends, then the
    periodic emits at their slots' places), ties by split; a periodic emit carries the lab's
    clock at its tick (ms, from the first warm-up tick, so Flink's idleness timer never sees 0,
    which it takes for "not started"). The idleness timeout is the lab's own: the driven clock
    runs in the lab's ms."""
    spec = flink_spec(result, FlinkTiming())
    cfg = lab_strategies(result.scenario)
    step_ms = cfg.flink_interval_ms
    k0 = min((float(s["steps"][0][1]) for s in spec["splits"] if s["steps"]), default=0.0)
    order: list[tuple[float, int, int]] = []
    for i, split in enumerate(spec["splits"]):
        for n, (_kind, tick, _events) in enumerate(split["steps"]):
            order.append((float(tick), i, n))
    turn = {(i, n): t + 1 for t, (_tick, i, n) in enumerate(sorted(order))}
    splits = []
    for i, split in enumerate(spec["splits"]):
        steps = []
        for n, (kind, tick, events) in enumerate(split["steps"]):
            k = math.floor(tick)
            clock = (k - math.floor(k0) + 1) * step_ms if kind == WAIT else 0
            steps.append((turn[(i, n)], int(kind), k, clock, events))
        splits.append(steps)
    return {
        "name": spec["name"],
        "bound_ms": cfg.flink_bound_ms,
        "idle_ms": cfg.flink_idle_timeout_ms,
        "window_ms": spec["window_ms"],
        "turns": len(order),
        "splits": splits,
        "paced": spec,
    }


def _spec_text(specs: list[dict[str, Any]], turn_timeout_ms: int) -> str:
    lines = [FORMAT, f"{turn_timeout_ms} {len(specs)}"]
    for s in specs:
        lines.append(str(s["name"]).replace("\n", " "))
        lines.append(f"{s['bound_ms']} {s['idle_ms']} {s['window_ms']} {len(s['splits'])} {s['turns']}")
        for steps in s["splits"]:
            lines.append(str(len(steps)))
            for turn, kind, tick, clock, events in steps:
                flat = " ".join(f"{w} {q} {et} {int(dup)}" for w, q, et, dup in events)
                lines.append(f"{turn} {kind} {tick} {clock} {len(events)}" + (f" {flat}" if flat else ""))
    return "\n".join(lines) + "\n"


def replay_flink_java(
    results: list[LabResult], python: str | None = None, turn_timeout_ms: int = TURN_TIMEOUT_MS
) -> list[FlinkReplay]:
    """Several scenarios in one driven Java Flink job (one JVM, one local mini-cluster).

    ``turn_timeout_ms``: how long a turn waits for the one before it to reach the late filter
    before the job fails, naming both (a stuck job, not a slow machine: a turn takes well
    under a millisecond)."""
    why = java_runner_unavailable(python)
    if why is not None:
        raise EngineUnavailableError(why)
    lib = flink_lib_dir(python)
    assert lib is not None
    java = _tool("java")
    assert java is not None
    specs = [driven_spec(r) for r in results]
    # the venv's PyFlink and the compiled job stay in the cache while the job runs (``user_cache``)
    with user_cache.using_python(python), compiled_job(lib) as classes:
        doc = _run_driven(java, lib, classes, specs, turn_timeout_ms)
    return _parse_driven(doc, specs)


def _run_driven(
    java: str, lib: Path, classes: Path, specs: list[dict[str, Any]], turn_timeout_ms: int
) -> dict[str, Any]:
    """Run the driven job over ``specs`` in one JVM; the document it wrote."""
    work = tempfile.mkdtemp(prefix="ingestwm-validate-flink-java-")
    try:
        spec_path, out_path = os.path.join(work, "spec.txt"), os.path.join(work, "out.json")
        with open(spec_path, "w") as f:
            f.write(_spec_text(specs, turn_timeout_ms))
        budget = 300 + sum(s["turns"] for s in specs) * 0.05
        cmd = [
            java,
            "-XX:+UseSerialGC",
            "-Xss2m",
            "-Dlog4j2.level=ERROR",
            "-Dlog4j2.statusLoggerLevel=OFF",
            "-cp",
            f"{classes}{os.pathsep}{lib}/*",
            MAIN_CLASS,
            spec_path,
            out_path,
        ]
        return run_job("the Java Flink job", cmd, work, out_path, budget, [s["name"] for s in specs])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _parse_driven(doc: dict[str, Any], specs: list[dict[str, Any]]) -> list[FlinkReplay]:
    """Each scenario's replay from the job's document, its turns all taken."""
    out = []
    for j, s in enumerate(specs):
        if int(doc["turns"][j]) != s["turns"]:
            took = doc["turns"][j]
            raise EngineRunError(f"{s['name']}: the Java Flink job took {took} of {s['turns']} turns")
        replay = parse_replay(doc, j, s["paced"], FlinkTiming())
        out.append(
            replace(replay, driven=True, max_slip_ms=0.0, slips_ms=(), end_moves=_end_moves(doc, j, s))
        )
    return out


def _end_moves(doc: dict[str, Any], j: int, spec: dict[str, Any]) -> int:
    """How many moves of scenario ``j``'s combined watermark the end of input made: those in a turn
    after the lab's last tick (its last release and the splits' ends), all at the end."""
    last = max((int(s["last"]) for s in spec["paced"]["splits"]), default=0)
    tick = {turn: t for steps in spec["splits"] for turn, _kind, t, _clock, _events in steps}
    moves = [(rec[3], rec[2], rec[4]) for rec in doc["records"] if rec[0] == "move" and rec[1] == j]
    after = [tick.get(int(turn), last + 1) > last for _at, wm, turn in sorted(moves) if wm > _NO_WATERMARK]
    first = after.index(True) if True in after else len(after)
    if not all(after[first:]):
        raise EngineRunError(f"{spec['name']}: a move within the lab's ticks came after one of the end's")
    return len(after) - first
