"""A Python with PyFlink for the Flink test, provisioned in the background while the suite runs.

PyFlink cannot live beside PySpark 4.3 in the test environment (apache-flink 2.3 needs
apache-beam <= 2.61, which pins pyarrow < 17; PySpark's Arrow path refuses < 18), so the
Flink test runs the job with its own interpreter (``ingestwm validate --flink-python``):
a venv with ``apache-flink==2.3.*`` in ingestwm's cache, ``~/.cache/ingestwm/flink-2.3-py3XX``
(``bench.validate.user_cache``; or ``$INGESTWM_FLINK_VENV``), outside the repository, reused
while it is valid (its ``ok`` file names the version a check imported). ``tests/conftest.py`` starts
``start()`` when the collected tests include one marked ``flink``, so the download
and install overlap the rest of the suite; the test calls ``wait()``.

Run as a script (``python tests/flink_venv.py DIR``) it does the provisioning itself,
holding ``DIR``'s cache lock exclusively (``user_cache.using``: two test runs share one
venv, and ``ingestwm cache clear --venv`` leaves a venv being built), logging to ``DIR.log``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["REQUIREMENT", "venv_dir", "start", "wait"]

REQUIREMENT = "apache-flink==2.3.*"
_VERSION_PREFIX = "2.3."
_CHECK = "import pyflink.datastream, pyflink.version as v; print(v.__version__)"

_proc: subprocess.Popen[bytes] | None = None
_started = 0.0


def venv_dir() -> Path:
    """Where the venv lives: ``$INGESTWM_FLINK_VENV`` or a cache dir per Flink and Python version."""
    env = os.environ.get("INGESTWM_FLINK_VENV")
    if env:
        return Path(env).expanduser()
    from bench.validate.user_cache import cache_root  # here: bench.validate loads in a second or so

    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    return cache_root() / f"flink-2.3-{tag}"


def _python(d: Path) -> Path:
    return d / "bin" / "python"


def _valid(d: Path) -> bool:
    ok = d / "ok"
    return ok.exists() and _python(d).exists() and ok.read_text().strip().startswith(_VERSION_PREFIX)


def _here_has_pyflink() -> bool:
    if importlib.util.find_spec("pyflink") is None:
        return False
    from pyflink.version import __version__

    return str(__version__).startswith(_VERSION_PREFIX)


def start() -> None:
    """Provision the venv in a background process unless this Python or a valid venv has PyFlink. O(1)."""
    global _proc, _started
    if _proc is not None or _here_has_pyflink() or _valid(venv_dir()):
        return
    d = venv_dir()
    d.parent.mkdir(parents=True, exist_ok=True)
    log = open(f"{d}.log", "ab")  # noqa: SIM115 - the child writes it; closed with the process
    _started = time.monotonic()
    _proc = subprocess.Popen(
        [sys.executable, __file__, str(d)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def wait(timeout_s: float = 1200.0) -> tuple[str | None, str]:
    """(the Python to run Flink with, "") once ready, or (None, why not: the log's tail)."""
    if _here_has_pyflink():
        return sys.executable, ""
    d = venv_dir()
    if _proc is None and not _valid(d):
        start()
    if _proc is not None:
        try:
            _proc.wait(timeout=max(1.0, timeout_s - (time.monotonic() - _started)))
        except subprocess.TimeoutExpired:
            return None, f"installing {REQUIREMENT} into {d} took over {timeout_s:.0f} s"
    if _valid(d):
        return str(_python(d)), ""
    tail = ""
    if Path(f"{d}.log").exists():
        tail = " | ".join(Path(f"{d}.log").read_text(errors="replace").strip().splitlines()[-4:])
    return None, f"could not install {REQUIREMENT} into {d}: {tail or 'no log'}"


def _provision(d: Path) -> int:
    from bench.validate.user_cache import using

    with using(d, exclusive=True):  # another test run may be installing it: wait for it
        if _valid(d):
            return 0
        shutil.rmtree(d, ignore_errors=True)
        steps = [
            [sys.executable, "-m", "venv", str(d)],
            [str(_python(d)), "-m", "pip", "install", "--disable-pip-version-check", "-q", REQUIREMENT],
        ]
        for cmd in steps:
            print("+", " ".join(cmd), flush=True)
            if subprocess.run(cmd).returncode != 0:
                print(f"failed: {' '.join(cmd)}", flush=True)
                return 1
        out = subprocess.run([str(_python(d)), "-c", _CHECK], capture_output=True, text=True)
        version = out.stdout.strip()
        if out.returncode != 0 or not version.startswith(_VERSION_PREFIX):
            print(f"its PyFlink does not import as {_VERSION_PREFIX}x: {out.stderr[-500:]}", flush=True)
            return 1
        (d / "ok").write_text(version + "\n")
        print(f"ready: PyFlink {version} in {d}", flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(_provision(Path(sys.argv[1])))
