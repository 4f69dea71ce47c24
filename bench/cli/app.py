"""The ``ingestwm`` command line: one click group, one thin command per job.

Each command parses its flags and calls the code that does the work: ``demo`` the main
job (``bench.cli.main_job``), ``simulate``, ``experiment``, ``compare`` and ``tune`` the
study layer's drivers (``bench.study``: the simulator and the lab, with outputs, replications
and sweeps), ``scenario`` the scenario language (``bench.spec``: schema, shipped files),
``validate`` the engine checks (``bench.validate``), ``bench`` the benchmark suite
(``bench.perf``), ``serve`` the store's server (``segmentstore.net``: its settings and
its loop live there; this command only maps flags to them). Errors become one line
and a non-zero exit status.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ..study.figures import FORMATS as FIGURE_FORMATS
from .cache_cmd import cache as cache_commands
from .group import group as group_commands
from .validate_cmd import validate_cmd

if TYPE_CHECKING:
    from ..study.run_options import RunOptions

__all__ = ["main", "cli"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ingestwm")
def cli() -> None:
    """ingestwm: a Pravega-style segment store with ingestion-time watermarks."""


cli.add_command(group_commands)  # ingestwm group list|describe|offline (bench/cli/group.py)
cli.add_command(validate_cmd)  # ingestwm validate: lab models vs Spark and Flink (bench/cli/validate_cmd.py)
cli.add_command(cache_commands)  # ingestwm cache info|clear: ~/.cache/ingestwm (bench/cli/cache_cmd.py)


def _sim_errors() -> tuple[type[Exception], ...]:
    """What ``demo``, ``simulate`` and ``experiment`` turn into one line: the simulator's and Spark's errors.

    ``spark_source.errors`` does not import pyspark: a missing Java (``JavaUnavailableError``)
    or a failed query is a ``SparkSourceError``.
    """
    from spark_source.errors import SparkSourceError

    from ..spec.errors import SimulationError

    return (SimulationError, SparkSourceError)


@cli.command()
@click.option(
    "--out", default=None, metavar="DIR", help="Output directory for series and plots (default ./runs/demo)."
)
@click.option("--no-spark", is_flag=True, help="Skip the Spark streaming query (simulation only).")
def demo(out: str | None, no_spark: bool) -> None:
    """Run the iot-sensors scenario (PDP-26 EventTimeITCase) end to end and print a short report.

    The simulation runs on the embedded store; then the same store is served on
    loopback and read by a Spark streaming query with per-sensor event-time windows.
    """
    from pathlib import Path

    try:
        if not no_spark:  # before the simulation's imports: no Java is one line at once
            from spark_source.session import check_java

            check_java()
        from .main_job import run_demo

        run_demo(click.echo, Path(out) if out is not None else None, spark=not no_spark)
    except _sim_errors() as e:
        raise click.ClickException(str(e)) from None


_RUN_OPTIONS = (
    click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override a scenario field, e.g. --set store.polling_period_ms=250 (repeatable).",
    ),
    click.option(
        "--seed",
        type=click.IntRange(min=0),
        default=None,
        help="Random seed, >= 0 (overrides the scenario's).",
    ),
    click.option(
        "--jobs", "-j", type=int, default=None, help="Processes for replications (default: all cores)."
    ),
    click.option(
        "--executor",
        type=click.Choice(["local", "spark"]),
        default="local",
        show_default=True,
        help="Where replications run: local processes, or one Spark task each.",
    ),
    click.option(
        "--master", default="local[*]", show_default=True, help="Spark master URL (--executor spark)."
    ),
)


_format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(FIGURE_FORMATS),
    default="png",
    show_default=True,
    help="Figure format (svg and pdf are vector, for papers).",
)
"""``--format`` of every command that draws figures."""


_REPLICATIONS_HELP = (
    "Run this many seeds (seed, seed+1, ...) and report mean, sd and 95 % CI "
    "(default: the scenario's replications)."
)


def _run_options(replications_help: str = _REPLICATIONS_HELP) -> Callable[[Any], Any]:
    """``--set``, ``--seed``, ``--replications``/``-n`` (its help: what a command does with them),
    ``--jobs``, ``--executor``, ``--master``: the options of every command that runs a scenario."""
    replications = click.option("--replications", "-n", type=int, default=None, help=replications_help)
    options = (*_RUN_OPTIONS[:2], replications, *_RUN_OPTIONS[2:])

    def apply(f: Any) -> Any:
        for opt in reversed(options):
            f = opt(f)
        return f

    return apply


def _options(executor: str, jobs: int | None, master: str, fmt: str) -> RunOptions:
    """A command's one ``RunOptions``: its flags, click's echo, and its command line for the manifest."""
    from ..study.manifest import Provenance
    from ..study.run_options import RunOptions

    return RunOptions(
        executor=executor,
        jobs=jobs,
        master=master,
        echo=click.echo,
        provenance=Provenance(["ingestwm", *sys.argv[1:]]),
        fmt=fmt,
    )


@cli.command()
@click.argument("scenario")
@_run_options()
@click.option(
    "--out", default=None, metavar="DIR", help="Output directory (default ./runs/<scenario>-seed<seed>)."
)
@_format_option
def simulate(
    scenario: str,
    overrides: tuple[str, ...],
    seed: int | None,
    replications: int | None,
    jobs: int | None,
    executor: str,
    master: str,
    out: str | None,
    fmt: str,
) -> None:
    """Run SCENARIO (a shipped name or a YAML file) and write its summary, series, plots and manifest."""
    from pathlib import Path

    from ..study.simulate_run import simulate_replications

    try:
        simulate_replications(
            scenario,
            replications,
            overrides,
            seed,
            Path(out) if out is not None else None,
            _options(executor, jobs, master, fmt),
        )
    except _sim_errors() as e:
        raise click.ClickException(str(e)) from None


@cli.command("bench")
@click.option(
    "--quick",
    is_flag=True,
    help="Smaller sizes: seconds per module (about a minute for each Spark one), not minutes.",
)
@click.option("--tiny", is_flag=True, help="Smallest sizes: a smoke run (the figures mean little).")
@click.option(
    "--only",
    "modules",
    multiple=True,
    metavar="MODULE",
    help="Run only this bench/perf module, e.g. bench_store (repeatable).",
)
@click.option(
    "--pytest",
    "with_pytest",
    is_flag=True,
    help="Run the pytest-benchmark suite instead: save the run under .benchmarks/<size>, compare "
    "it with the last one there, fail if a benchmark regressed (best round 25% slower).",
)
@click.option("--slow", is_flag=True, help="With --pytest: also the SLOW modules (Spark: minutes).")
def bench_cmd(quick: bool, tiny: bool, modules: tuple[str, ...], with_pytest: bool, slow: bool) -> None:
    """Run every bench/perf/bench_*.py module and print one table of ratios measured side by side."""
    from ..perf.errors import BenchmarkError
    from ..perf.suite import Size

    if quick and tiny:
        raise click.UsageError("give --quick or --tiny, not both")
    size: Size = "tiny" if tiny else "quick" if quick else "full"
    try:
        if with_pytest:
            from ..perf.pytest_bench import run_pytest

            code = run_pytest(size, modules, click.echo, slow=slow)
            if code:
                raise click.exceptions.Exit(code)
            return
        from ..perf.suite import run_bench

        run_bench(size, click.echo, modules or None)
    except BenchmarkError as e:
        raise click.ClickException(str(e)) from None


@cli.command()
@click.argument("sweep")
@click.option(
    "--replications", "-n", type=int, default=None, help="Seeds per grid point (overrides the sweep's)."
)
@click.option(
    "--executor",
    type=click.Choice(["spark", "local"]),
    default="spark",
    show_default=True,
    help="One Spark task per run, or local processes.",
)
@click.option(
    "--jobs", "-j", type=int, default=None, help="Processes with --executor local (default: all cores)."
)
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option(
    "--out", default=None, metavar="DIR", help="Output directory (default ./runs/experiment-<sweep>)."
)
@_format_option
def experiment(
    sweep: str,
    replications: int | None,
    executor: str,
    jobs: int | None,
    master: str,
    out: str | None,
    fmt: str,
) -> None:
    """Run the parameter grid SWEEP (a shipped name or YAML file) of simulations or lab comparisons."""
    from pathlib import Path

    from ..study.sweep import run_experiment

    try:
        run_experiment(
            sweep, Path(out) if out is not None else None, replications, _options(executor, jobs, master, fmt)
        )
    except _sim_errors() as e:
        raise click.ClickException(str(e)) from None


@cli.command()
@click.argument("scenario")
@_run_options()
@click.option(
    "--out",
    default=None,
    metavar="DIR",
    help="Also write compare.csv/.json, the figure and manifest.json there.",
)
@click.option("--no-plot", is_flag=True, help="With --out: skip the figure.")
@_format_option
def compare(
    scenario: str,
    overrides: tuple[str, ...],
    seed: int | None,
    replications: int | None,
    jobs: int | None,
    executor: str,
    master: str,
    out: str | None,
    no_plot: bool,
    fmt: str,
) -> None:
    """Run SCENARIO (shipped name or YAML file) through the watermark strategies (the four built-in
    ones and its strategies.custom); print the table."""
    from pathlib import Path

    from ..study.compare_run import compare_scenario

    try:
        compare_scenario(
            scenario,
            overrides,
            seed,
            Path(out) if out is not None else None,
            not no_plot,
            replications,
            _options(executor, jobs, master, fmt),
        )
    except _sim_errors() as e:
        raise click.ClickException(str(e)) from None


@cli.command()
@click.argument("scenario")
@click.option(
    "--late-target",
    "late_target",
    type=click.FloatRange(0.0, 1.0),
    required=True,
    metavar="F",
    help="The late fraction to meet, e.g. 0.001 (0.1 % of the delivered events late).",
)
@_run_options("Seeds per evaluated bound (default: the scenario's replications, 5 if it has 1).")
@click.option(
    "--max-bound-ms",
    type=click.IntRange(min=0),
    default=10_000,
    show_default=True,
    help="The largest bound tried: a strategy that fails there is reported as not met.",
)
@click.option(
    "--resolution-ms",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Bounds searched are multiples of this.",
)
@click.option("--out", default=None, metavar="DIR", help="Output directory (default ./runs/tune-<scenario>).")
@_format_option
def tune(
    scenario: str,
    late_target: float,
    overrides: tuple[str, ...],
    seed: int | None,
    replications: int | None,
    max_bound_ms: int,
    resolution_ms: int,
    executor: str,
    jobs: int | None,
    master: str,
    out: str | None,
    fmt: str,
) -> None:
    """Find each strategy's least bound (maxEventTimeLag, Flink's bound, Spark's delay, a custom
    strategy's bound_param) whose late fraction meets --late-target with 95 % confidence, and its costs."""
    from pathlib import Path

    from ..study.tune_run import tune_scenario

    try:
        tune_scenario(
            scenario,
            late_target,
            replications,
            overrides,
            seed,
            Path(out) if out is not None else None,
            _options(executor, jobs, master, fmt),
            max_bound_ms=max_bound_ms,
            resolution_ms=resolution_ms,
        )
    except _sim_errors() as e:
        raise click.ClickException(str(e)) from None


@cli.group()
def scenario() -> None:
    """The scenario language: its schema, the shipped scenarios, a scenario resolved."""


@scenario.command("schema")
def scenario_schema() -> None:
    """Print the scenario schema (Markdown: every field's type, unit, default and meaning)."""
    from ..spec.schema_doc import schema_markdown

    click.echo(schema_markdown(), nl=False)


@scenario.command("list")
def scenario_list() -> None:
    """List the shipped scenarios and sweeps with their descriptions."""
    from ..spec.errors import ScenarioError
    from ..spec.loader import read_mapping, shipped

    for name, path in shipped().items():
        data = read_mapping(path, "scenario file", ScenarioError)
        lab = " [lab]" if "strategies" in data else ""
        click.echo(f"{name:18} {data.get('description', '')}{lab}")
    for name, path in shipped("sweeps").items():
        data = read_mapping(path, "sweep", ScenarioError)
        click.echo(f"{'sweeps/' + name:18} {data.get('description', '')}")


@scenario.command("show")
@click.argument("name")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a field (repeatable).")
def scenario_show(name: str, overrides: tuple[str, ...]) -> None:
    """Print scenario NAME fully resolved (every default filled in) as YAML."""
    import yaml

    from ..spec.scenario import load_scenario, scenario_to_dict

    try:
        sc = load_scenario(name, overrides)
    except _sim_errors() as e:
        raise click.ClickException(str(e)) from None
    click.echo(yaml.safe_dump(scenario_to_dict(sc), sort_keys=False), nl=False)


@cli.command()
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML file with [store] and [server] settings; flags override it.",
)
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Durable store directory.")
@click.option("--host", default=None, help="Address to bind.  [default: 127.0.0.1]")
@click.option("--port", type=int, default=None, help="Port (0 picks a free one).  [default: 12345]")
@click.option("--token", envvar="INGESTWM_TOKEN", default=None, help="Shared secret (env INGESTWM_TOKEN).")
@click.option("--certfile", type=click.Path(dir_okay=False), default=None, help="TLS certificate.")
@click.option("--keyfile", type=click.Path(dir_okay=False), default=None, help="TLS private key.")
@click.option("--sync", type=click.Choice(["always", "interval", "none"]), default=None, help="Log sync.")
@click.option(
    "--max-watermark-lag",
    "max_watermark_lag_ms",
    type=int,
    default=None,
    metavar="MS",
    help="PDP-26 max watermark lag: idle segments' watermarks advance after it.  [default: 10000]",
)
@click.option(
    "--polling-period",
    "polling_period_ms",
    type=int,
    default=None,
    metavar="MS",
    help="How often the watermark advancer runs.  [default: 1000]",
)
@click.option(
    "--eviction-age",
    "eviction_age_ms",
    type=int,
    default=None,
    metavar="MS",
    help="Segments unused this long leave memory.  [default: 600000]",
)
@click.option(
    "--snapshot-every",
    "snapshot_every_ops",
    type=int,
    default=None,
    metavar="OPS",
    help="Snapshot and truncate the log every so many operations.  [default: 100000]",
)
@click.option(
    "--transaction-lease",
    "transaction_lease_ms",
    type=int,
    default=None,
    metavar="MS",
    help="Open transactions unwritten this long are aborted.  [default: 600000]",
)
@click.option(
    "--max-connections",
    type=int,
    default=None,
    help="Connections held at once; more are refused.  [default: 1024]",
)
@click.option(
    "--handshake-timeout",
    "handshake_timeout_s",
    type=float,
    default=None,
    metavar="S",
    help="Close connections without a hello after this long.  [default: 5]",
)
@click.option(
    "--idle-timeout",
    "idle_timeout_s",
    type=float,
    default=None,
    metavar="S",
    help="Close connections idle this long.  [default: 600]",
)
def serve(
    config_file: str | None,
    data_dir: str | None,
    token: str | None,
    certfile: str | None,
    keyfile: str | None,
    **settings: Any,
) -> None:
    """Serve a segment store until SIGINT/SIGTERM; prints ``listening on HOST:PORT``, then how long
    the numba kernels took to be ready (loaded, or compiled on a first start) and the settings."""
    from segmentstore.errors import SegmentStoreError
    from segmentstore.net.serve_config import load_serve_config
    from segmentstore.net.server import serve as run_server

    try:
        config = load_serve_config(config_file, settings)
        run_server(data_dir, config, token, certfile, keyfile, echo=_echo_flush)
    except (SegmentStoreError, OSError) as e:
        raise click.ClickException(str(e)) from None


def _echo_flush(line: str) -> None:
    click.echo(line)
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ingestwm`` console script."""
    try:
        # without standalone mode, click returns the code of a click.exceptions.Exit instead of raising it
        code = cli.main(args=argv, prog_name="ingestwm", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    return code if isinstance(code, int) else 0
