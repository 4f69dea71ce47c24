"""Every command and snippet of the documentation runs, so none can rot; the project's own files agree.

The fenced ``sh`` and ``python`` blocks of ``README.md``, ``CONTRIBUTING.md`` and
``docs/*.md`` run here (conventions in CONTRIBUTING.md, "Documentation"): ``python``
blocks as a script in a new process, ``sh`` blocks line by line (``ingestwm`` as
``python -m bench.cli``; ``pytest``, ``ruff``, ``mypy`` as ``python -m``), each in an
empty directory with this checkout first on ``PYTHONPATH``. A ``text`` block right after
an ``sh`` or ``python`` block is its output. ``# docs-test: slow`` blocks are marked slow;
``# docs-test: long-running`` blocks and the README's two set-up commands are not run;
``# docs-test: fragment`` Python blocks (they need what a test cannot have, such as another
host) are compiled, not run.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```([A-Za-z0-9_-]*)\n(.*?)^```\n?", re.MULTILINE | re.DOTALL)
_MARK = re.compile(r"^# docs-test: (slow|long-running|fragment) \(.+\)$")
_IN_REPO = ("pytest", "ruff", "mypy")  # these look at the checkout: they run in it
_TIMEOUT_S = 900


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, text, marker, and the output shown after it."""

    path: Path
    line: int
    lang: str
    text: str
    mark: str | None
    output: str | None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, in order; a ``text`` block is attached to the block before it."""
    source = path.read_text(encoding="utf-8")
    found = list(_FENCE.finditer(source))
    out: list[Block] = []
    for i, m in enumerate(found):
        lang, text = m.group(1), m.group(2)
        if lang not in ("sh", "python"):
            continue
        first = text.splitlines()[0] if text.strip() else ""
        mark = _MARK.match(first)
        if first.startswith("# docs-test") and mark is None:
            raise AssertionError(f"{path.name}: malformed marker {first!r} (see CONTRIBUTING.md)")
        output = None
        nxt = found[i + 1] if i + 1 < len(found) else None
        follows = nxt is not None and source[m.end() : nxt.start()].strip() == ""
        if nxt is not None and nxt.group(1) == "text" and follows:
            output = nxt.group(2)
        line = source.count("\n", 0, m.start()) + 1
        out.append(Block(path, line, lang, text, mark.group(1) if mark else None, output))
    return out


def _set_up(block: Block) -> bool:
    return block.path.name == "README.md" and block.text.startswith("python3 -m venv")


ALL = [b for path in DOCS for b in blocks(path)]


def _params() -> list[Any]:
    runnable = [b for b in ALL if b.mark != "long-running" and not _set_up(b)]
    return [pytest.param(b, id=b.id, marks=[pytest.mark.slow] if b.mark == "slow" else []) for b in runnable]


def _argv(command: str) -> list[str]:
    words = shlex.split(command)
    head, rest = words[0], words[1:]
    if head == "ingestwm":
        return [sys.executable, "-m", "bench.cli", *rest]
    if head == "python":
        return [sys.executable, *rest]
    if head in _IN_REPO:
        return [sys.executable, "-m", head, *rest]
    raise AssertionError(f"no way to run {command!r} from the docs (ingestwm, python, {', '.join(_IN_REPO)})")


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=_TIMEOUT_S)


def _normal(text: str) -> list[str]:
    return [" ".join(ln.split()) for ln in text.strip().splitlines()]


@pytest.mark.parametrize("block", _params())
def test_documented_block_runs(block: Block, tmp_path: Path) -> None:
    if block.lang == "python" and block.mark == "fragment":
        compile(block.text, block.id, "exec")  # a syntax error still fails
        return
    if block.lang == "python":
        done = _run([sys.executable, "-c", block.text], tmp_path)
        assert done.returncode == 0, f"{block.id}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        if block.output is not None:
            assert _normal(done.stdout) == _normal(block.output), (
                f"{block.id}: the output shown is not what it prints:\n{done.stdout[-2000:]}"
            )
        return
    # a reader runs the docs' commands at the checkout's root, where docs/ (the tutorial's files) is
    (tmp_path / "docs").symlink_to(ROOT / "docs")
    commands = [ln for ln in block.text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert commands, f"{block.id}: an sh block without a command"
    for command in commands:
        argv = _argv(command)
        done = _run(argv, ROOT if shlex.split(command)[0] in _IN_REPO else tmp_path)
        assert done.returncode == 0, f"{block.id}: {command}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    if block.output is not None:
        assert _normal(done.stdout) == _normal(block.output), (
            f"{block.id}: the output shown is not what it prints"
        )


def test_the_docs_hold_blocks_of_each_kind_and_skip_only_what_they_mark() -> None:
    """The collection above is not empty by mistake: commands, snippets, outputs, and two set-up lines."""
    assert sum(_set_up(b) for b in ALL) == 2
    assert any(b.lang == "python" and b.path.parent.name == "docs" for b in ALL)
    assert any(b.output is not None for b in ALL)
    # only installs and commands that run for minutes are left out (CONTRIBUTING.md): shell
    # commands, never a Python example a reader copies
    skipped = [b for b in ALL if b.mark == "long-running"]
    assert all(b.lang == "sh" for b in skipped), [b.id for b in skipped if b.lang != "sh"]
    assert all(re.search(r"install|minute|suite", b.text.splitlines()[0]) for b in skipped), [
        b.id for b in skipped if not re.search(r"install|minute|suite", b.text.splitlines()[0])
    ]


def test_links_between_the_docs_point_at_files_that_exist() -> None:
    link = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
    for path in DOCS:
        for target in link.findall(path.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            assert (path.parent / target).resolve().is_relative_to(ROOT), (
                f"{path.name}: {target} leaves the repo"
            )
            assert (path.parent / target).exists(), f"{path.name} links {target}, which does not exist"


def test_no_file_cites_a_design_outside_the_repository() -> None:
    brief = "DESIGN"  # spelled apart, so that this file does not match itself
    cited = re.compile(rf"{brief} §|shared/{brief}\.md")
    stale = [
        str(p.relative_to(ROOT))
        for top in ("segmentstore", "readergroup", "flink_compat", "spark_source", "bench", "tests", "docs")
        for p in (ROOT / top).rglob("*")
        if p.suffix in (".py", ".md", ".yaml", ".toml") and cited.search(p.read_text(encoding="utf-8"))
    ]
    stale += [p.name for p in ROOT.glob("*.md") if cited.search(p.read_text(encoding="utf-8"))]
    stale += ["pyproject.toml"] if cited.search((ROOT / "pyproject.toml").read_text()) else []
    assert stale == [], f"cite docs/design.md instead: {stale}"


def test_changelog_top_version_is_the_package_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), re.MULTILINE)
    assert headings, "CHANGELOG.md has no version headings"
    assert headings[0] == version, f"CHANGELOG.md starts at {headings[0]}, pyproject.toml says {version}"
    assert len(set(headings)) == len(headings), f"a version appears twice: {headings}"


def test_the_license_is_the_one_pyproject_declares() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]["text"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert declared == "Apache-2.0"
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) > 190  # the full text


def test_pre_commit_runs_the_checks_the_tests_run() -> None:
    import yaml

    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    entries = {h["id"]: h["entry"] for repo in config["repos"] for h in repo["hooks"]}
    documented = {c for b in ALL if b.path.name == "CONTRIBUTING.md" for c in b.text.splitlines()}
    for check in ("ruff check", "ruff format --check", "mypy"):
        assert check in entries.values(), f"pre-commit does not run {check}"
        assert any(c.startswith(check) for c in documented), f"CONTRIBUTING.md does not show {check}"
