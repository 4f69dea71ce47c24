"""The project's set-up contract: README commands, CI script, and a cheap package import."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _readme_commands() -> list[str]:
    """The README's set-up commands: its ``sh`` blocks that make a virtual environment.

    Its other ``sh`` blocks are examples, run by ``tests/test_docs.py``.
    """
    blocks = _FENCE.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    return [b.strip() for b in blocks if b.startswith("python3 -m venv")]


def _script_commands(path: Path) -> list[str]:
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def test_readme_has_exactly_two_single_line_set_up_commands() -> None:
    commands = _readme_commands()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count("python3 -m venv") == len(commands), "a set-up command outside its own sh block"
    assert len(commands) == 2, commands
    assert all("\n" not in c for c in commands), commands
    main, tests = commands
    assert "ingestwm" in main and "pytest" not in main
    # not [test,flink]: PyFlink's apache-beam pins pyarrow < 17, and PySpark 4.3's Arrow path needs >= 18
    assert "pytest" in tests and "[test]" in tests and "flink" not in tests
    assert all(c.startswith("python3 -m venv") for c in commands)


def test_ci_runs_exactly_the_readme_test_command_and_fails_with_it() -> None:
    ci = ROOT / ".ci" / "run"
    assert ci.stat().st_mode & 0o111, ".ci/run is not executable"
    commands = _script_commands(ci)
    test_command = _readme_commands()[1]
    assert commands.count(test_command) == 1
    # its exit status is the script's: it is the last command, and errors stop the script
    assert commands[-1] == test_command
    assert any(c.startswith("set -") and "e" in c.split()[1] for c in commands)
    pytest_runs = [c for c in commands if "pytest" in c]
    assert pytest_runs == [test_command]


def test_importing_segmentstore_does_not_import_numba() -> None:
    code = "import segmentstore, sys; assert 'numba' not in sys.modules, 'numba imported'"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_segmentstore_top_level_is_its_public_surface_of_at_most_12_modules() -> None:
    top = sorted(p.stem for p in (ROOT / "segmentstore").glob("*.py"))
    assert len(top) <= 12, f"segmentstore/ has {len(top)} top-level modules (at most 12): {top}"


def test_every_package_and_data_file_ships_in_the_wheel() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("segmentstore", "readergroup", "flink_compat", "spark_source", "bench")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert on_disk <= listed, f"packages missing from pyproject: {sorted(on_disk - listed)}"
    for top in ("bench", "readergroup"):  # shipped scenarios; shipped watermark transcripts
        patterns = config["package-data"][top]
        folders = {str(p.parent.relative_to(ROOT / top)) for p in (ROOT / top).rglob("*.yaml")}
        assert folders, f"no YAML files in {top}/"
        for folder in folders:
            assert f"{folder}/*.yaml" in patterns, f"{top}/{folder}/*.yaml is not in the package data"
    # the Java part of validate's Flink check, compiled on first use from the installed source
    java = {str(p.parent.relative_to(ROOT / "bench")) for p in (ROOT / "bench").rglob("*.java")}
    assert java == {"validate/java"}, java
    assert "validate/java/*.java" in config["package-data"]["bench"]


_PACKAGES = ("segmentstore", "readergroup", "flink_compat", "spark_source", "bench")  # docs/design.md §2
# readergroup's role sub-packages, each with the ones it may import (its top-level modules
# errors, config and transcripts are the shared vocabulary every one of them may import)
_RG_LAYERS: dict[str, set[str]] = {
    "format": set(),
    "writing": {"format"},
    "group_state": {"format"},
    "reading": {"format", "group_state"},
}


def _module_names() -> dict[str, Path]:
    names: dict[str, Path] = {}
    for top in _PACKAGES:
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _imports(name: str, path: Path, modules: dict[str, Path], type_checking: bool) -> set[str]:
    """The project modules ``name`` imports, lazy imports in functions included.

    ``type_checking``: count the imports under ``if TYPE_CHECKING:`` too (they make no
    cycle at run time, but still say which layer a module knows).
    """

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes: Iterable[ast.AST]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test) and not type_checking:
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                for alias in node.names:  # ``from package import module`` imports the module
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
            visit(ast.iter_child_nodes(node))

    visit([ast.parse(path.read_text(encoding="utf-8"))])
    out: set[str] = set()
    for target in found:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)
    return out


def test_no_module_imports_one_that_imports_it_back_and_no_package_imports_upward() -> None:
    modules = _module_names()
    # imports under ``if TYPE_CHECKING:`` count too: a circle hidden there is still two modules
    # that each need the other to be understood
    graph = {name: _imports(name, path, modules, type_checking=True) for name, path in modules.items()}
    rank = {top: i for i, top in enumerate(_PACKAGES)}
    upward = [(m, d) for m, ds in graph.items() for d in ds if rank[d.split(".")[0]] > rank[m.split(".")[0]]]
    assert not upward, f"imports of a package listed after the importer's: {upward}"
    # a cycle: a module reachable from one it imports
    for start, deps in graph.items():
        seen: set[str] = set()
        todo = list(deps)
        while todo:
            m = todo.pop()
            assert m != start, f"{start} imports a module that imports it back"
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m])


def test_readergroup_sub_packages_import_only_the_layers_below_and_name_their_modules() -> None:
    modules = _module_names()
    subs = sorted({n.split(".")[1] for n in modules if n.startswith("readergroup.") and n.count(".") == 2})
    assert subs == sorted(_RG_LAYERS), subs
    for name, path in modules.items():
        parts = name.split(".")
        if parts[0] != "readergroup" or name == "readergroup":
            continue
        layer = parts[1] if len(parts) == 3 else None  # None: a top-level module (errors, config, ...)
        allowed = set() if layer is None else _RG_LAYERS[layer] | {layer}
        for dep in _imports(name, path, modules, type_checking=True):
            if dep.startswith("readergroup"):
                dep_parts = dep.split(".")
                dep_layer = dep_parts[1] if len(dep_parts) > 1 and dep_parts[1] in _RG_LAYERS else None
                assert dep != "readergroup", f"{name} imports the readergroup facade (a layer above it)"
                assert dep_layer is None or dep_layer in allowed, f"{name} imports {dep}: {layer} may not"
    for sub in subs:  # the house is readable from its folders: each names its modules
        doc = (ROOT / "readergroup" / sub / "__init__.py").read_text(encoding="utf-8")
        for path in (ROOT / "readergroup" / sub).glob("*.py"):
            if path.stem != "__init__":
                assert f"``{path.stem}``" in doc, f"readergroup/{sub}/__init__.py does not name {path.stem}"


# bench's rooms, bottom first (docs/design.md §2): each may import only itself and those before it
_BENCH_LAYERS = ("spec", "sim", "lab", "study", "validate", "perf", "cli")
_BENCH_DATA = {"scenarios"}  # the shipped YAML files: data, no code
_MAX_LINES = 600


def test_bench_rooms_import_only_the_rooms_below_and_name_their_modules() -> None:
    modules = _module_names()
    rooms = sorted({n.split(".")[1] for n in modules if n.startswith("bench.") and n.count(".") >= 1})
    assert sorted(set(rooms) - _BENCH_DATA) == sorted(_BENCH_LAYERS), rooms
    rank = {room: i for i, room in enumerate(_BENCH_LAYERS)}
    for name, path in modules.items():
        parts = name.split(".")
        if parts[0] != "bench":
            continue
        deps = {d for d in _imports(name, path, modules, type_checking=True) if d.startswith("bench")}
        if len(parts) == 1 or parts[1] in _BENCH_DATA:
            assert not deps, f"{name} imports {sorted(deps)}: the top package and the data import none"
            continue
        for dep in deps:
            dep_room = dep.split(".")[1] if "." in dep else None
            assert dep_room not in _BENCH_DATA, f"{name} imports {dep}: read shipped files with spec.loader"
            assert dep_room is not None and rank[dep_room] <= rank[parts[1]], (
                f"{name} imports {dep}: {parts[1]} sits below {dep_room} ({' < '.join(_BENCH_LAYERS)})"
            )
    for room in _BENCH_LAYERS:  # a newcomer finds a module from its folder's docstring
        doc = (ROOT / "bench" / room / "__init__.py").read_text(encoding="utf-8")
        for path in (ROOT / "bench" / room).glob("*.py"):
            if path.stem in ("__init__", "__main__", "conftest") or path.stem.startswith("test_"):
                continue
            # a benchmark module is named by its area: ``sim`` for bench_sim
            names = {path.stem, path.stem.removeprefix("bench_")}
            assert any(f"``{n}``" in doc for n in names), f"bench/{room}/__init__.py omits {path.stem}"


def test_no_module_is_longer_than_the_house_limit() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in _module_names().values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > _MAX_LINES
    }
    assert not long, f"modules over {_MAX_LINES} lines (split by concept): {long}"
