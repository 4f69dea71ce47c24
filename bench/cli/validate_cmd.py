"""``ingestwm validate [SCENARIO ...]``: the lab's Spark and Flink models against the engines."""

from __future__ import annotations

import sys
from typing import Any

import click

__all__ = ["DEFAULT_FLINK_MAX_PACE_MS", "DEFAULT_FLINK_PACE_MS", "DEFAULT_MUTATION_SCENARIOS", "validate_cmd"]

# Every shipped scenario has been exact against Flink at 500, 1000 or 2000 ms per emit on a
# 2-core machine (docs/engines.md), so the command's defaults reproduce that table; a quick
# look at 100 ms: --flink-pace-ms 100 --flink-max-pace-ms 100.
DEFAULT_FLINK_PACE_MS = 500
DEFAULT_FLINK_MAX_PACE_MS = 2000
# --mutations without --generated: the generated set docs/engines.md reports (every mutation caught)
DEFAULT_MUTATION_SCENARIOS = 40


@click.command("validate")
@click.argument("scenarios", nargs=-1)
@click.option(
    "--engine",
    "engines",
    multiple=True,
    type=click.Choice(["spark", "flink"]),
    help="Engines to check (repeat; default both).",
)
@click.option("--out", default=None, help="Directory for validate.csv and validate.json.")
@click.option(
    "--flink-python", default=None, help="Python with PyFlink for the Flink job (default: this one)."
)
@click.option(
    "--flink-pace-ms",
    type=int,
    default=DEFAULT_FLINK_PACE_MS,
    show_default=True,
    help="Wall-clock ms per lab watermark emit in the Flink replay (the regime: docs/engines.md).",
)
@click.option(
    "--flink-max-pace-ms",
    type=int,
    default=None,
    help=f"Run a Flink replay that left the regime again at twice the pace, up to this "
    f"[default: the larger of {DEFAULT_FLINK_MAX_PACE_MS} and the pace; the pace itself: one run].",
)
@click.option(
    "--flink-runner",
    type=click.Choice(["auto", "java", "python"]),
    default="auto",
    show_default=True,
    help="Flink check: java (a driven Java job: exact or differs, minutes; needs javac), python (the "
    "paced PyFlink replay: hours, may end out of regime; a JRE is enough), auto (java where it can run).",
)
@click.option(
    "--flink-source",
    "flink_sources",
    multiple=True,
    type=click.Choice(["reader", "segment_union"]),
    help="Flink topologies to check, a row each (repeat; default: each scenario's strategies.flink_source).",
)
@click.option(
    "--generated",
    type=click.IntRange(min=1),
    default=None,
    help="Validate N generated scenarios (small, at the models' edges: docs/engines.md) instead of "
    "shipped ones; each prints the edge cases it hit.",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Seed of the generated scenarios (scenario i of a seed is the same whatever N).",
)
@click.option(
    "--mutations",
    is_flag=True,
    help="Apply each seeded model bug alone to the generated scenarios and show the check finds it "
    f"(exit 1 if one survives); with --generated N (default {DEFAULT_MUTATION_SCENARIOS}).",
)
@click.option(
    "--mutation",
    "only_mutations",
    multiple=True,
    help="Only this mutation (repeat; implies --mutations; a name it does not know lists them).",
)
def validate_cmd(
    scenarios: tuple[str, ...],
    engines: tuple[str, ...],
    out: str | None,
    flink_python: str | None,
    flink_pace_ms: int,
    flink_max_pace_ms: int | None,
    flink_sources: tuple[str, ...],
    flink_runner: str,
    generated: int | None,
    seed: int,
    mutations: bool,
    only_mutations: tuple[str, ...],
) -> None:
    """Run lab scenarios (default: every shipped one) through the models and the real engines.

    Prints, per scenario and strategy, model vs engine for late events, complete windows
    and the watermark, with a verdict; an engine that is not installed is reported, not fatal.
    Exits 1 if any comparison differs, failed or (Flink, paced) left its regime. Flink runs as a
    driven Java job where a JDK is here (every shipped scenario in minutes); the paced PyFlink
    replay (--flink-runner python) takes two hours or more on 2 cores. --generated N checks N
    small generated scenarios that reach the models' edges; --mutations shows that the check
    catches each of a list of model bugs on them.
    """
    import os
    import platform
    from pathlib import Path

    from ..lab import lab_scenarios
    from ..lab.lab_scenario import LabScenarioError, load_lab_scenario
    from ..spec.errors import OutputError
    from ..spec.scenario import scenario_to_dict
    from ..study.manifest import Provenance
    from ..study.simulate_run import prepare_output_dir
    from ..validate import FlinkTiming, ValidateError, format_verdicts, validate, write_verdicts
    from ..validate.mutations import mutation_names

    prov, load_at_start = Provenance(), os.getloadavg()
    unknown = sorted(set(only_mutations) - set(mutation_names()))
    if unknown:
        raise click.BadParameter(
            f"no mutation {unknown[0]!r}; mutations: {', '.join(mutation_names())}", param_hint="--mutation"
        )
    mutations = mutations or bool(only_mutations)
    if mutations and generated is None:
        generated = DEFAULT_MUTATION_SCENARIOS
    if generated is not None and scenarios:
        raise click.UsageError("give scenario names or --generated N, not both")
    if mutations and (flink_sources or flink_runner == "python"):
        raise click.UsageError(
            "--mutations checks each generated scenario's own topology in the driven Java Flink job: "
            "no --flink-source, no --flink-runner python"
        )
    engines = engines or ("spark", "flink")
    if generated is not None:
        return _generated(
            generated,
            seed,
            engines,
            mutations,
            only_mutations,
            out,
            flink_python,
            flink_runner,
            prov,
            load_at_start,
        )
    names = list(scenarios) or sorted(lab_scenarios())
    try:
        timing = FlinkTiming(pace_ms=flink_pace_ms)
        if flink_max_pace_ms is None:
            flink_max_pace_ms = max(DEFAULT_FLINK_MAX_PACE_MS, flink_pace_ms)
        elif flink_max_pace_ms < flink_pace_ms:
            raise click.BadParameter(
                f"{flink_max_pace_ms} is below --flink-pace-ms {flink_pace_ms}",
                param_hint="--flink-max-pace-ms",
            )
        if out is not None:  # before a run that can take hours, not after it
            prepare_output_dir(Path(out))
        verdicts = validate(
            names,
            engines,
            _spark_session,
            timing,
            flink_python,
            echo=lambda s: click.echo(s, err=True),
            flink_max_pace_ms=flink_max_pace_ms,
            flink_sources=flink_sources,
            flink_runner=flink_runner,
        )
    except (ValidateError, LabScenarioError, OutputError) as e:
        raise click.ClickException(str(e)) from None
    click.echo(format_verdicts(verdicts))
    if out is not None:
        pacing = {
            "flink_timing": vars_of(timing),
            "flink_max_pace_ms": flink_max_pace_ms,
            "flink_sources": list(flink_sources),  # none: each scenario's strategies.flink_source
            "flink_runner": flink_runner,  # as asked; each row's runner is in validate.csv/json
        }
        meta = {"scenarios": names, "python": platform.python_version(), **pacing}
        for p in write_verdicts(verdicts, Path(out), meta):
            click.echo(f"wrote {p}")
        # the Flink regime depends on the machine: its cores and load go with the code and scenarios
        scs = [load_lab_scenario(n) for n in names]
        extra = {
            "engines": list(engines),
            "flink_python": flink_python,
            **pacing,
            "random": {sc.name: sc.random_parts for sc in scs},
            "cpus": os.cpu_count(),
            "load_average": {"start": list(load_at_start), "end": list(os.getloadavg())},
        }
        try:
            path = prov.write(
                Path(out), "validate", [sc.seed for sc in scs], [scenario_to_dict(sc) for sc in scs], extra
            )
        except OutputError as e:
            raise click.ClickException(str(e)) from None
        click.echo(f"wrote {path}")
    if any(v.verdict in ("differs", "failed", "out of regime") for v in verdicts):
        sys.exit(1)


def vars_of(timing: Any) -> dict[str, Any]:
    return {f: getattr(timing, f) for f in timing.__slots__}


def _spark_session() -> Any:
    from spark_source.session import local_session

    # fast_start: a replay is hundreds of small micro-batches, which C1 runs in less CPU than C2
    return local_session("ingestwm-validate", fast_start=True)


def _generated(
    n: int,
    seed: int,
    engines: tuple[str, ...],
    mutations: bool,
    only: tuple[str, ...],
    out: str | None,
    flink_python: str | None,
    flink_runner: str,
    prov: Any,
    load_at_start: tuple[float, float, float],
) -> None:
    """``--generated N [--mutations]``: generate, validate (or check the mutations), print, write."""
    import os
    import platform
    from pathlib import Path

    import yaml

    from ..spec.errors import OutputError
    from ..study.simulate_run import prepare_output_dir
    from ..validate import FlinkTiming, ValidateError, format_verdicts, user_cache, validate, write_verdicts
    from ..validate.edges import EdgeCounts, count_edges
    from ..validate.flink_java import java_runner_unavailable
    from ..validate.generate import generate
    from ..validate.mutations import MUTATIONS, EngineRuns, check_mutations
    from ..validate.report import format_edges, format_mutations, mutation_rows, write_rows
    from ..validate.spark_engine import spark_available

    def echo(s: str) -> None:
        click.echo(s, err=True)

    edges: list[EdgeCounts] = []
    outcomes: list[Any] = []
    try:
        if out is not None:
            prepare_output_dir(Path(out))
        echo(f"generating {n} scenarios of seed {seed}")
        gen = generate(n, seed)
        scs = [g.scenario for g in gen]
        if mutations:
            why = {"spark": spark_available(), "flink": java_runner_unavailable(flink_python)}
            checked = [e for e in engines if why[e] is None]
            for e in engines:
                if why[e] is not None:
                    echo(f"mutations: {e} not checked: {why[e]}")
            if not checked:
                raise click.ClickException(
                    "no engine to check the mutations with: " + "; ".join(f"{e}: {why[e]}" for e in engines)
                )
            chosen = [m for m in MUTATIONS if not only or m.name in only]
            runs = EngineRuns(_spark_session, flink_python)
            # a venv in ingestwm's cache is held from start to end, as validate holds it
            with user_cache.using_python(flink_python if "flink" in checked else None):
                verdicts, outcomes = check_mutations(
                    scs, checked, runs, chosen, echo, on_result=lambda r: edges.append(count_edges(r))
                )
            echo(f"mutations: the engines ran {runs.flink_runs} Flink and {runs.spark_runs} Spark replays")
        else:
            verdicts = validate(
                scs,
                engines,
                _spark_session,
                FlinkTiming(pace_ms=DEFAULT_FLINK_PACE_MS),
                flink_python,
                echo=echo,
                flink_max_pace_ms=DEFAULT_FLINK_MAX_PACE_MS,
                flink_runner=flink_runner,
                on_result=lambda r: edges.append(count_edges(r)),
            )
    except (ValidateError, OutputError) as e:
        raise click.ClickException(str(e)) from None
    click.echo(format_verdicts(verdicts))
    click.echo("")
    click.echo(format_edges(edges))
    if mutations:
        click.echo("")
        click.echo(format_mutations(outcomes))
    if out is not None:
        d = Path(out)
        meta = {"generated": n, "seed": seed, "python": platform.python_version(), "mutations": mutations}
        for p in write_verdicts(verdicts, d, meta):
            click.echo(f"wrote {p}")
        click.echo(f"wrote {write_rows([e.as_dict() for e in edges], d / 'edges.csv')}")
        if mutations:
            click.echo(f"wrote {write_rows(mutation_rows(outcomes), d / 'mutations.csv')}")
        (d / "scenarios").mkdir(exist_ok=True)
        for g in gen:
            (d / "scenarios" / f"{g.scenario.name}.yaml").write_text(yaml.safe_dump(g.data, sort_keys=False))
        click.echo(f"wrote {d / 'scenarios'} ({len(gen)} scenario files: ingestwm validate FILE reruns one)")
        from ..spec.scenario import scenario_to_dict

        extra = {
            "engines": list(engines),
            "flink_python": flink_python,
            "flink_runner": flink_runner,
            "generated": {"n": n, "seed": seed},
            "mutations": [m.name for m in MUTATIONS if not only or m.name in only] if mutations else [],
            "cpus": os.cpu_count(),
            "load_average": {"start": list(load_at_start), "end": list(os.getloadavg())},
        }
        try:
            path = prov.write(
                d, "validate", [sc.seed for sc in scs], [scenario_to_dict(sc) for sc in scs], extra
            )
        except OutputError as e:
            raise click.ClickException(str(e)) from None
        click.echo(f"wrote {path}")
    bad = any(v.verdict in ("differs", "failed", "out of regime") for v in verdicts)
    if bad or any(o.survived for o in outcomes):
        sys.exit(1)
