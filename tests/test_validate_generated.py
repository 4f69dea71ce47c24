"""ingestwm validate --generated and --mutations: scenarios at the models' edges, model bugs caught.

The lab-only tests say what the generator makes (reproducible, at the edges, runs that move
with their start time) and what the replays are fed (each split's contents are what its
reader group delivered). The engine tests run the CI's generated set (``CI_SEED``, ``CI_N``)
through real Spark (the ``spark-validate`` group) and Flink's driven Java job: every scenario
exact, and every mutation of the model each engine checks caught. ``ingestwm validate
--mutations`` runs the full set by hand (docs/engines.md).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from spark_fixtures import spark_fixture  # noqa: F401
from test_validate import _java_python

from bench.cli import cli
from bench.lab import lab_scenario_from_dict, run_compare
from bench.lab.compare import LabResult
from bench.lab.compared_strategies import FlinkStrategy
from bench.lab.engine_rules import ENGINE_RULES, EngineRules
from bench.lab.lab_readers import LabReader
from bench.lab.spark_model import SparkStrategy
from bench.sim.workloads import payload_ids
from bench.spec.seeds import Seeds
from bench.validate.edges import EDGE_COLUMNS, count_edges
from bench.validate.flink_java import driven_spec
from bench.validate.flink_job import BUNDLE
from bench.validate.generate import draw, generate, generated_scenario
from bench.validate.mutations import MUTATIONS, EngineRuns, check_mutations
from bench.validate.run import with_flink_source

CI_SEED, CI_N = 2, 6
"""The generated set the suite checks the engines on (every mutation caught on it; the full set:
``ingestwm validate --mutations``, docs/engines.md)."""


@pytest.fixture(scope="module")
def ci_set() -> list[Any]:
    return generate(CI_N, CI_SEED)


def test_a_generated_scenario_is_the_same_from_its_seed_and_index_whatever_the_count() -> None:
    a = generated_scenario(7, 2)
    assert generate(3, 7)[2].data == a.data == generated_scenario(7, 2).data
    assert generated_scenario(8, 2).data != a.data and generated_scenario(7, 1).data != a.data
    assert a.scenario.name == "gen-7-2" and lab_scenario_from_dict(a.data) == a.scenario


def test_generated_scenarios_reach_every_edge_the_shipped_ones_miss(ci_set: list[Any]) -> None:
    """Ties (an event at exactly the watermark it met, in both models), watermarks on a window's last
    millisecond, idle transitions and rebalances; emit intervals, triggers and idleness timeouts on
    the tick's grid and off it."""
    results = [run_compare(g.scenario) for g in ci_set]
    edges = [count_edges(r) for r in results]
    for column in EDGE_COLUMNS:
        assert sum(getattr(e, column) for e in edges) > 0, column
    assert all(e.flink_ties + e.spark_ties >= 2 for e in edges), edges
    for r, e in zip(results, edges, strict=True):  # a tie is one: an event at its watermark, late
        fl = r.strategies["flink"]
        assert isinstance(fl, FlinkStrategy)
        ties = [a for a in fl.arrivals if a[4] == a[5]]
        assert len(ties) == e.flink_ties and all(a[6] for a in ties)


def test_the_draw_covers_the_grids_lifecycles_and_topologies() -> None:
    """Over 40 draws of a seed (the scenarios before their probes; no lab run): emit intervals and
    triggers shorter and longer than the lab's step, on its grid and off it; idleness timeouts a
    whole number of emits and not; hand-overs off 1 s; both topologies and Spark input kinds;
    scaling, transactions, bursts, readers that join late, crash, leave and restart."""
    data = [draw(Seeds(0).rng(f"validate.generated.{i}"), f"d{i}") for i in range(40)]
    knobs = [d["strategies"] for d in data]

    def some(pred: Any) -> bool:
        return any(pred(k) for k in knobs)

    assert some(lambda k: k["flink_interval_ms"] % k["tick_ms"]) and some(
        lambda k: k["spark_trigger_ms"] % k["tick_ms"]
    )
    assert some(lambda k: k["flink_interval_ms"] < k["tick_ms"]) and some(
        lambda k: k["flink_interval_ms"] > k["tick_ms"]
    )
    assert some(lambda k: k["spark_trigger_ms"] < k["tick_ms"]) and some(
        lambda k: k["spark_trigger_ms"] > k["tick_ms"]
    )
    assert some(lambda k: k["flink_idle_timeout_ms"] % k["flink_interval_ms"])
    assert some(lambda k: k["flink_idle_timeout_ms"] % k["flink_interval_ms"] == 0)
    assert {k["flink_source"] for k in knobs} == {"reader", "segment_union"}
    assert {k["spark_input"] for k in knobs} == {"stream", "segment"} and {
        k["spark_policy"] for k in knobs
    } == {"min", "max"}
    writers = [w for d in data for w in d["writers"]]
    assert any(1000 % w["tick_ms"] for w in writers)  # hand-overs off the 1 s grid
    assert {w["workload"]["kind"] for w in writers} >= {"constant", "bursty", "poisson", "periodic_idle"}
    assert any("commit_interval_ms" in w for w in writers) and any(d.get("scaling") for d in data)
    lives = {r["name"] for d in data for r in d["readers"]}
    assert lives >= {"late", "crash", "leave", "restart"}


def test_a_whole_run_moves_with_its_start_time(ci_set: list[Any]) -> None:
    """What lets the generator land watermarks on a window's end - 1: with the start moved by d, every
    event time and every watermark of both models moves by d, and nothing else changes."""
    sc = ci_set[1].scenario
    d = 333
    a, b = run_compare(sc), run_compare(dataclasses.replace(sc, start_time_ms=sc.start_time_ms + d))
    fa, fb = a.strategies["flink"], b.strategies["flink"]
    sa, sb = a.strategies["spark"], b.strategies["spark"]
    assert isinstance(fa, FlinkStrategy) and isinstance(fb, FlinkStrategy)
    assert isinstance(sa, SparkStrategy) and isinstance(sb, SparkStrategy)

    def by(wm: int) -> int:  # "none yet" (Long.MIN_VALUE) stays
        return wm + d if wm > -(2**62) else wm

    assert [(c + d, by(wm)) for c, wm in fa.emitted] == fb.emitted
    moved = [(c + d, s, w, q, et + d, by(wm), late) for c, s, w, q, et, wm, late in fa.arrivals]
    assert moved == fb.arrivals and len(moved) > 50
    assert [b.watermark + d if b.watermark else 0 for b in sa.batches] == [b.watermark for b in sb.batches]
    assert [(b.t_ms, b.late) for b in sa.batches] == [(b.t_ms, b.late) for b in sb.batches]


def _delivered(
    monkeypatch: pytest.MonkeyPatch, strategy: str = "flink"
) -> list[tuple[int, str, str, int, int, int]]:
    """Every event ``strategy``'s reader group delivers, as its readers read it: (clock, reader,
    segment, writer, seq, event time), recorded at the readers, before the model sees them."""
    out: list[tuple[int, str, str, int, int, int]] = []
    real = LabReader.on_batch

    def recording(self: LabReader, t_ms: int, batch: Any) -> None:
        if self.strategy.name == strategy and len(batch):
            writers, seqs = payload_ids(batch.payload)
            now = self.world.clock.now()
            for si, w, q, et in zip(
                batch.segment_index.tolist(),
                writers.tolist(),
                seqs.tolist(),
                batch.event_time.tolist(),
                strict=True,
            ):
                out.append((now, self.name, batch.segments[si], w, q, et))
        real(self, t_ms, batch)

    monkeypatch.setattr(LabReader, "on_batch", recording)
    return out


@pytest.mark.parametrize("topology", ["reader", "segment_union"])
def test_each_splits_contents_are_what_the_reader_group_delivered(
    topology: str, ci_set: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the engines receive of the events: each split (a subtask: one reader's deliveries; or a
    segment's) and, per release, its events -- exactly what the strategy's reader group delivered,
    redelivered ones included (marked), each in the release of the tick it came before."""
    delivered = _delivered(monkeypatch)
    redelivered = 0
    for g in ci_set:
        delivered.clear()
        result = run_compare(with_flink_source(g.scenario, topology))
        spec = driven_spec(result)
        sc = result.scenario
        step, start = sc.strategies.flink_interval_ms, sc.start_time_ms  # type: ignore[union-attr]
        want: dict[str, dict[int, list[tuple[int, int, int, int]]]] = defaultdict(lambda: defaultdict(list))
        seen: set[tuple[int, int]] = set()
        for clock, reader, segment, w, q, et in delivered:
            split = reader if topology == "reader" else segment
            dup = (w, q) in seen
            seen.add((w, q))
            redelivered += dup
            release = math.ceil((clock - start) / step)
            want[split][release].append((-1, -1, et, 1) if dup else (w, q, et, 0))
        got: dict[str, dict[int, list[tuple[int, int, int, int]]]] = defaultdict(lambda: defaultdict(list))
        for split, steps in zip(spec["paced"]["splits"], spec["splits"], strict=True):
            for _turn, kind, tick, _clock, events in steps:
                if kind == BUNDLE:
                    got[split["name"]][tick] += [tuple(e) for e in events]  # type: ignore[misc]
        assert {s: {t: sorted(v) for t, v in r.items()} for s, r in got.items()} == {
            s: {t: sorted(v) for t, v in r.items()} for s, r in want.items()
        }, g.scenario.name
        if topology == "reader":  # a subtask per reader instance, all of them from the first tick on
            names = [s["name"] for s in spec["paced"]["splits"]]
            assert set(want) <= set(names)
    assert redelivered > 0  # readers crashed and restarted: redeliveries reached the splits too


def test_each_spark_batchs_rows_are_what_the_reader_group_delivered(
    ci_set: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What Spark receives of the events: each micro-batch's rows (input, writer, number, event time,
    in delivery order) are exactly what the strategy's reader group delivered since the batch before,
    redelivered rows included; an input is the stream or, with ``spark_input: segment``, the segment."""
    delivered = _delivered(monkeypatch, "spark")
    inputs_seen = set()
    for g in ci_set:
        delivered.clear()
        result = run_compare(g.scenario)
        sp = result.strategies["spark"]
        assert isinstance(sp, SparkStrategy)
        sc = result.scenario
        by_segment = sc.strategies.spark_input == "segment"  # type: ignore[union-attr]
        inputs_seen.add(by_segment)
        rows = [(seg if by_segment else sc.stream.name, w, q, et) for _c, _r, seg, w, q, et in delivered]
        clocks = [c for c, *_ in delivered]
        i = 0
        for b in sp.batches:
            j = i
            while j < len(rows) and clocks[j] <= sc.start_time_ms + b.t_ms:
                j += 1
            assert list(b.rows) == rows[i:j], (g.scenario.name, b.index)
            i = j
        assert i == len(rows) or all(c > sc.start_time_ms + sp.batches[-1].t_ms for c in clocks[i:])
    assert inputs_seen == {True, False}


def _records(r: LabResult) -> tuple[Any, ...]:
    fl, sp = r.strategies["flink"], r.strategies["spark"]
    assert isinstance(fl, FlinkStrategy) and isinstance(sp, SparkStrategy)
    return (fl.arrivals, fl.emitted, fl.fired_at, fl.statuses, sp.batches, r.rows)


def test_each_mutation_is_the_engines_rules_with_one_wrong_and_changes_the_model(ci_set: list[Any]) -> None:
    """A mutation is the engines' rules with one replaced, given to a lab run (nothing is patched):
    every seam of ``EngineRules`` has one; each changes the model's records on the CI set; runs with
    the engines' rules before and after are the same."""
    seams = [f.name for f in dataclasses.fields(EngineRules)]
    base = [_records(run_compare(g.scenario)) for g in ci_set[:3]]
    wrong_seams = set()
    for m in MUTATIONS:
        wrong = [f for f in seams if getattr(m.rules, f) != getattr(ENGINE_RULES, f)]
        assert len(wrong) == 1, (m.name, wrong)
        wrong_seams |= set(wrong)
        broken: list[AssertionError] = []
        changed = [_records(run_compare(g.scenario, rules=m.rules, broken=broken.append)) for g in ci_set[:3]]
        assert changed != base, f"{m.name} changes nothing on the first three CI scenarios"
    assert wrong_seams == set(seams)
    assert [_records(run_compare(g.scenario)) for g in ci_set[:3]] == base


def test_a_wrong_models_broken_invariant_is_raised_unless_the_run_is_told_where_to_put_it(
    ci_set: list[Any],
) -> None:
    """The lab checks its strategies after each run: a model with the engines' rules keeps its
    invariants; a wrong one that breaks them (a valve taking the maximum leaves aligned channels below
    its output) raises, or, for ``validate --mutations``, hands each to ``broken``."""
    wrong = next(m for m in MUTATIONS if m.name == "valve-max")
    hit = []
    for g in ci_set:
        broken: list[AssertionError] = []
        run_compare(g.scenario, rules=wrong.rules, broken=broken.append)
        if broken:
            hit.append(g.scenario)
        run_compare(g.scenario, broken=broken.append)  # the engines' rules: nothing more
        assert len(broken) == (g.scenario in hit)
    assert hit, "valve-max broke no invariant on the CI set"
    with pytest.raises(AssertionError, match="below the output"):
        run_compare(hit[0], rules=wrong.rules)


def test_validate_generated_prints_each_scenarios_edges_and_writes_them(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["--generated", "2", "--seed", "3", "--engine", "flink", "--flink-python", "/nonexistent/py"]
    r = CliRunner().invoke(cli, ["validate", *args, "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "not run" in r.output and "ties flink" in r.output and "gen-3-1" in r.output
    files = sorted(p.name for p in (out / "scenarios").iterdir())
    assert files == ["gen-3-0.yaml", "gen-3-1.yaml"]
    again = yaml.safe_load((out / "scenarios" / "gen-3-1.yaml").read_text())
    assert lab_scenario_from_dict(again) == generated_scenario(3, 1).scenario  # rerun by file
    assert (out / "edges.csv").read_text().splitlines()[0].startswith("scenario,flink_ties")
    for args, said in [
        (["--generated", "2", "tiny"], "not both"),
        (["--mutation", "no-such-bug"], "no mutation 'no-such-bug'; mutations: late-lt"),
        (["--mutations", "--flink-runner", "python"], "driven Java Flink job"),
    ]:
        r = CliRunner().invoke(cli, ["validate", *args])
        assert r.exit_code == 2 and said in r.output, (args, r.output)


def _ci_mutations(engine: str, runs: EngineRuns, scenarios: list[Any]) -> None:
    """The CI set through ``engine``: the unmutated model exact everywhere, every mutation of the model
    the engine checks caught (``differs`` on at least one scenario)."""
    mine = [m for m in MUTATIONS if engine in m.models]
    plain, outcomes = check_mutations([g.scenario for g in scenarios], [engine], runs, mine)
    assert [v.verdict for v in plain] == ["exact"] * len(scenarios), [(v.scenario, v.note) for v in plain]
    assert [o.mutation.name for o in outcomes] == [m.name for m in mine]
    survived = [(o.mutation.name, o.caught) for o in outcomes if o.survived]
    assert not survived, f"mutations the check did not catch: {survived}"
    for o in outcomes:
        assert o.first and o.mutation.name, o  # each named the first difference it found


@pytest.mark.slow
@pytest.mark.xdist_group("spark-validate")
def test_spark_agrees_on_generated_scenarios_and_catches_every_spark_model_bug(
    spark: Any, ci_set: list[Any]
) -> None:
    runs = EngineRuns(lambda: spark, None)
    _ci_mutations("spark", runs, ci_set)
    # Spark ran once per distinct input: the unmutated set, and the mutations that changed batches
    assert CI_N <= runs.spark_runs < 2 * CI_N


@pytest.mark.slow
@pytest.mark.flink
def test_flink_agrees_on_generated_scenarios_and_catches_every_flink_model_bug(ci_set: list[Any]) -> None:
    runs = EngineRuns(lambda: None, _java_python())
    _ci_mutations("flink", runs, ci_set)
    # the driven job ran once per distinct input: the unmutated set, and the emit intervals' spans
    assert CI_N <= runs.flink_runs <= 3 * CI_N


def test_mutation_outcome_survives_unless_every_model_it_breaks_caught_it() -> None:
    late = next(m for m in MUTATIONS if m.name == "late-lt")
    from bench.validate.mutations import MutationOutcome

    assert not MutationOutcome(late, 2, {"flink": ("a",), "spark": ("b",)}, {}).survived
    assert MutationOutcome(late, 2, {"flink": ("a",), "spark": ()}, {}).survived
    assert not MutationOutcome(late, 2, {"flink": ("a",)}, {}).survived  # spark not checked here
    assert copy.copy(late).models == ("flink", "spark")
