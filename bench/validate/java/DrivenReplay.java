/*
 * ingestwm validate's Flink check, driven: the lab's Flink splits through a real Flink job whose
 * processing time is driven by the replay instead of the wall clock. Compiled on first use by
 * bench/validate/flink_java.py (javac -cp '<flink>/lib/*') into a user cache directory; run as
 * `java -cp <classes>:<flink>/lib/* ingestwm.validate.DrivenReplay SPEC OUT`.
 *
 * What is Flink's own: WatermarkStrategy.forBoundedOutOfOrderness(bound).withIdleness(timeout)
 * (BoundedOutOfOrdernessWatermarks inside WatermarksWithIdleness and its IdlenessTimer), the
 * TimestampsAndWatermarksOperator and its WatermarkEmitter, the network between the subtasks, the
 * StatusWatermarkValve of the operator after them, the keyed timer service, the event-time
 * tumbling windows and their late side output. What is driven: processing time, and the order in
 * which the subtasks' outputs reach the valve.
 *
 * - One job per run, one pipeline per scenario: a one-element-per-subtask trigger (fromSequence,
 *   parallelism 1, partitioned so that subtask i gets element i) into Driver (parallelism = the
 *   scenario's splits: subtask i is split i), chained to assignTimestampsAndWatermarks(Driven),
 *   keyed into LateFilter (parallelism 1: its input's valve combines the splits, one channel each),
 *   whose on-time events go to TumblingEventTimeWindows counting per window.
 * - Driven wraps Flink's own generator, created with a WatermarkGeneratorSupplier.Context whose
 *   input-activity clock is a ManualClock. A TICK record sets that clock to the lab's tick time and
 *   calls the generator's onPeriodicEmit (the lab's periodic emit); events and marks are its
 *   onEvent (activity, maximum); END makes the emitter send Long.MAX_VALUE, the call the operator
 *   makes when its input ends (processWatermark); MARKER records are neither. Flink's own timer is
 *   off (pipeline.auto-watermark-interval 0: TimestampsAndWatermarksOperator registers none) and
 *   Driven's onPeriodicEmit (the operator's last one, in finish) does nothing.
 * - Turns: every step of every split has a global turn number (the lab's order: a tick's releases,
 *   then its finished splits' ends, then its periodic emits in slot order). A driver emits its step
 *   of turn n, then a MARKER n, only once LateFilter has taken MARKER n - 1; the channel from a
 *   subtask to LateFilter is FIFO, so everything of turn n - 1 (records, and the watermark or idle
 *   status its emit produced) went through the valve before turn n starts. All subtasks run in this
 *   JVM (a local MiniCluster), so the turns are a static monitor. A turn that waits longer than the
 *   spec's timeout fails the job, naming the turn it waited for.
 * - Records for the output (one JSON document, the shape flink_job.py writes): per event the
 *   watermark LateFilter's timer service had when it took it and whether it was late (<=), every
 *   move of that watermark (an event-time timer one above it, re-armed at each move) with the turn
 *   that made it, every window
 *   fired with its count and the watermark that fired it, and the late side output of the windows.
 */
package ingestwm.validate;

import org.apache.flink.api.common.eventtime.TimestampAssigner;
import org.apache.flink.api.common.eventtime.TimestampAssignerSupplier;
import org.apache.flink.api.common.eventtime.Watermark;
import org.apache.flink.api.common.eventtime.WatermarkGenerator;
import org.apache.flink.api.common.eventtime.WatermarkGeneratorSupplier;
import org.apache.flink.api.common.eventtime.WatermarkOutput;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.Partitioner;
import org.apache.flink.api.common.functions.RichFlatMapFunction;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;
import org.apache.flink.util.OutputTag;
import org.apache.flink.util.clock.RelativeClock;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

public final class DrivenReplay {

    /** Step kinds in the spec (flink_job.py's numbers). */
    static final int WAIT = 0, BUNDLE = 1, MARK = 2, END = 3, PRIME = 5;

    /** Record kinds. */
    public static final int EVENT = 0, ACTIVITY = 1, TICK = 2, FINISH = 3, MARKER = 4;

    static final long PAST = -(1L << 62);
    static final String FORMAT = "ingestwm-driven-replay 1";

    private DrivenReplay() {}

    /** A record of the replay (a Flink POJO). */
    public static final class Rec {
        public int kind;
        public int split;
        public long release; // EVENT: its release (tick); MARKER: its turn; TICK: its tick
        public long ts; // EVENT, ACTIVITY: event time; TICK: the lab's clock in ms
        public int writer;
        public long seq;
        public boolean dup;

        public Rec() {}

        static Rec of(int kind, int split, long release, long ts) {
            Rec r = new Rec();
            r.kind = kind;
            r.split = split;
            r.release = release;
            r.ts = ts;
            return r;
        }
    }

    // ------------------------------------------------------------------ the spec

    static final class Step {
        long turn;
        int kind;
        long tick;
        long clockMs;
        long[] events = new long[0]; // writer, seq, event time, dup; four per event
    }

    static final class Scenario {
        String name;
        long boundMs, idleMs, windowMs;
        List<List<Step>> splits = new ArrayList<>();
        Turns turns;
    }

    static final class Spec {
        long timeoutMs;
        List<Scenario> scenarios = new ArrayList<>();
    }

    private static final Map<String, Spec> SPECS = new HashMap<>();

    /** The spec at {@code path}, read once per JVM (every subtask shares it and its turns). */
    static synchronized Spec load(String path) throws IOException {
        Spec spec = SPECS.get(path);
        if (spec == null) {
            spec = parse(path);
            SPECS.put(path, spec);
        }
        return spec;
    }

    private static long[] numbers(String line) {
        String[] parts = line.trim().split(" +");
        long[] out = new long[parts.length];
        for (int i = 0; i < parts.length; i++) {
            out[i] = Long.parseLong(parts[i]);
        }
        return out;
    }

    private static Spec parse(String path) throws IOException {
        try (BufferedReader in = Files.newBufferedReader(Paths.get(path), StandardCharsets.UTF_8)) {
            if (!FORMAT.equals(in.readLine())) {
                throw new IOException(path + ": not a spec of " + FORMAT);
            }
            Spec spec = new Spec();
            long[] head = numbers(in.readLine()); // timeout ms, scenarios
            spec.timeoutMs = head[0];
            for (int j = 0; j < head[1]; j++) {
                Scenario sc = new Scenario();
                sc.name = in.readLine();
                long[] h = numbers(in.readLine()); // bound, idle, window, splits, turns
                sc.boundMs = h[0];
                sc.idleMs = h[1];
                sc.windowMs = h[2];
                String[] what = new String[(int) h[4] + 1];
                for (int i = 0; i < h[3]; i++) {
                    long[] s = numbers(in.readLine()); // steps
                    List<Step> steps = new ArrayList<>();
                    for (int k = 0; k < s[0]; k++) {
                        long[] v = numbers(in.readLine()); // turn kind tick clock n [w q et dup]*
                        Step st = new Step();
                        st.turn = v[0];
                        st.kind = (int) v[1];
                        st.tick = v[2];
                        st.clockMs = v[3];
                        st.events = new long[(int) v[4] * 4];
                        System.arraycopy(v, 5, st.events, 0, st.events.length);
                        steps.add(st);
                        what[(int) st.turn] = "split " + i + " " + kindName(st.kind) + " at tick " + st.tick;
                    }
                    sc.splits.add(steps);
                }
                sc.turns = new Turns(sc.name, spec.timeoutMs, what);
                spec.scenarios.add(sc);
            }
            return spec;
        }
    }

    static String kindName(int kind) {
        switch (kind) {
            case WAIT: return "periodic emit";
            case BUNDLE: return "release";
            case MARK: return "mark";
            case END: return "end";
            case PRIME: return "prime";
            default: return "step " + kind;
        }
    }

    // ------------------------------------------------------------------ turns

    /** The global order of one scenario's steps: turn n starts once LateFilter took marker n - 1. */
    static final class Turns {
        private final String scenario;
        private final long timeoutMs;
        private final String[] what;
        private long seen;
        private String broken;

        Turns(String scenario, long timeoutMs, String[] what) {
            this.scenario = scenario;
            this.timeoutMs = timeoutMs;
            this.what = what;
        }

        synchronized void await(long turn) throws InterruptedException {
            long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
            while (seen < turn - 1 && broken == null) {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    throw new IllegalStateException(
                            scenario + ": turn " + turn + " (" + describe(turn) + ") waited "
                                    + timeoutMs + " ms: the late filter took turns 1.." + seen
                                    + ", and turn " + (seen + 1) + " (" + describe(seen + 1)
                                    + ") has not reached it");
                }
                wait(Math.max(1, left / 1_000_000L));
            }
            if (broken != null) {
                throw new IllegalStateException(broken);
            }
        }

        synchronized long taken() {
            return seen;
        }

        private String describe(long turn) {
            String w = turn >= 0 && turn < what.length ? what[(int) turn] : null;
            return w == null ? "no step of the spec has it" : w;
        }

        synchronized void seen(long turn) {
            if (turn != seen + 1) {
                broken = scenario + ": the late filter took marker " + turn + " after " + seen;
                notifyAll();
                throw new IllegalStateException(broken);
            }
            seen = turn;
            notifyAll();
        }
    }

    // ------------------------------------------------------------------ the records written out

    private static final List<String> LINES = new ArrayList<>();

    static void record(String line) {
        synchronized (LINES) {
            LINES.add(line);
        }
    }

    // ------------------------------------------------------------------ the job's functions

    /** Subtask i of scenario j: split i's steps, each in its turn, each followed by its marker. */
    public static final class Driver extends RichFlatMapFunction<Long, Rec> {
        private final String specPath;
        private final int scenario;
        private transient Scenario sc;
        private transient int me;

        public Driver(String specPath, int scenario) {
            this.specPath = specPath;
            this.scenario = scenario;
        }

        @Override
        public void open(OpenContext context) throws Exception {
            sc = load(specPath).scenarios.get(scenario);
            me = getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
        }

        @Override
        public void flatMap(Long trigger, Collector<Rec> out) throws Exception {
            if (trigger != me) {
                throw new IllegalStateException("subtask " + me + " was given the trigger of " + trigger);
            }
            for (Step st : sc.splits.get(me)) {
                sc.turns.await(st.turn);
                switch (st.kind) {
                    case BUNDLE:
                        for (int e = 0; e < st.events.length; e += 4) {
                            Rec r = Rec.of(EVENT, me, st.tick, st.events[e + 2]);
                            r.writer = (int) st.events[e];
                            r.seq = st.events[e + 1];
                            r.dup = st.events[e + 3] != 0;
                            out.collect(r);
                        }
                        break;
                    case MARK: // the split's first activity, far in the past
                        out.collect(Rec.of(ACTIVITY, me, st.tick, PAST));
                        break;
                    case PRIME: // activity below the mark's time, so the mark's watermark still activates
                        out.collect(Rec.of(ACTIVITY, me, st.tick, PAST - 1));
                        break;
                    case WAIT:
                        out.collect(Rec.of(TICK, me, st.tick, st.clockMs));
                        break;
                    case END:
                        out.collect(Rec.of(FINISH, me, st.tick, Long.MIN_VALUE));
                        break;
                    default:
                        throw new IllegalStateException("unknown step kind " + st.kind);
                }
                out.collect(Rec.of(MARKER, me, st.turn, Long.MIN_VALUE));
            }
        }
    }

    /** The lab's processing time: set by the tick records. */
    static final class ManualClock implements RelativeClock {
        long nanos;

        @Override
        public long relativeTimeMillis() {
            return nanos / 1_000_000L;
        }

        @Override
        public long relativeTimeNanos() {
            return nanos;
        }
    }

    /** Flink's own generator, its periodic emits and input-activity clock driven by the tick records. */
    static final class Driven implements WatermarkGenerator<Rec> {
        private final WatermarkGenerator<Rec> inner;
        private final ManualClock clock;

        Driven(WatermarkGenerator<Rec> inner, ManualClock clock) {
            this.inner = inner;
            this.clock = clock;
        }

        @Override
        public void onEvent(Rec r, long timestamp, WatermarkOutput output) {
            switch (r.kind) {
                case EVENT:
                case ACTIVITY:
                    inner.onEvent(r, timestamp, output);
                    break;
                case TICK:
                    clock.nanos = r.ts * 1_000_000L;
                    inner.onPeriodicEmit(output);
                    break;
                case FINISH: // what TimestampsAndWatermarksOperator.processWatermark does as its input ends
                    output.emitWatermark(Watermark.MAX_WATERMARK);
                    break;
                default: // a marker: neither activity nor an emit
                    break;
            }
        }

        @Override
        public void onPeriodicEmit(WatermarkOutput output) {
            // the periodic emits are the tick records' (Flink's timer is off; this is finish()'s)
        }
    }

    /** forBoundedOutOfOrderness(bound).withIdleness(idle), its input-activity clock driven. */
    public static final class DrivenStrategy implements WatermarkStrategy<Rec> {
        private static final long serialVersionUID = 1L;
        private final long boundMs;
        private final long idleMs;

        public DrivenStrategy(long boundMs, long idleMs) {
            this.boundMs = boundMs;
            this.idleMs = idleMs;
        }

        @Override
        public WatermarkGenerator<Rec> createWatermarkGenerator(WatermarkGeneratorSupplier.Context context) {
            ManualClock clock = new ManualClock();
            WatermarkStrategy<Rec> flinks =
                    WatermarkStrategy.<Rec>forBoundedOutOfOrderness(Duration.ofMillis(boundMs))
                            .withIdleness(Duration.ofMillis(idleMs));
            WatermarkGenerator<Rec> inner =
                    flinks.createWatermarkGenerator(
                            new WatermarkGeneratorSupplier.Context() {
                                @Override
                                public MetricGroup getMetricGroup() {
                                    return context.getMetricGroup();
                                }

                                @Override
                                public RelativeClock getInputActivityClock() {
                                    return clock;
                                }
                            });
            return new Driven(inner, clock);
        }

        @Override
        public TimestampAssigner<Rec> createTimestampAssigner(TimestampAssignerSupplier.Context context) {
            return (r, previous) -> r.ts;
        }
    }

    public static final class ByIndex implements Partitioner<Long> {
        @Override
        public int partition(Long key, int partitions) {
            return (int) (key % partitions);
        }
    }

    public static final class Self implements KeySelector<Long, Long> {
        @Override
        public Long getKey(Long value) {
            return value;
        }
    }

    public static final class One implements KeySelector<Rec, Integer> {
        @Override
        public Integer getKey(Rec value) {
            return 0;
        }
    }

    /** Each event at or below the current watermark is late; the rest go on to the windows. */
    public static final class LateFilter extends KeyedProcessFunction<Integer, Rec, Rec> {
        private final String specPath;
        private final int scenario;
        private transient Turns turns;
        private transient boolean armed;
        private transient long at;

        public LateFilter(String specPath, int scenario) {
            this.specPath = specPath;
            this.scenario = scenario;
        }

        @Override
        public void open(OpenContext context) throws Exception {
            turns = load(specPath).scenarios.get(scenario).turns;
        }

        @Override
        public void processElement(Rec r, Context ctx, Collector<Rec> out) {
            long wm = ctx.timerService().currentWatermark();
            if (!armed) { // from the first record on, every move of the watermark is logged
                armed = true;
                if (wm < Long.MAX_VALUE) {
                    ctx.timerService().registerEventTimeTimer(wm + 1);
                }
            }
            if (r.kind == MARKER) {
                turns.seen(r.release);
                return;
            }
            if (r.kind != EVENT || r.dup) { // a redelivered event: the lab's de-duplication drops it
                return;
            }
            boolean late = r.ts <= wm;
            record("[\"arr\"," + scenario + "," + r.split + "," + r.release + "," + wm + "," + (at++)
                    + ",[[" + r.writer + "," + r.seq + "," + r.ts + "," + late + "]]]");
            if (!late) {
                out.collect(r);
            }
        }

        @Override
        public void onTimer(long timestamp, OnTimerContext ctx, Collector<Rec> out) {
            long wm = ctx.timerService().currentWatermark();
            if (wm < Long.MAX_VALUE) {
                ctx.timerService().registerEventTimeTimer(wm + 1);
            }
            // the turn whose elements made it: the one after the last marker taken
            record("[\"move\"," + scenario + "," + wm + "," + (at++) + "," + (turns.taken() + 1) + "]");
        }
    }

    /** A window's count, with the watermark that fired it. */
    public static final class Count extends ProcessWindowFunction<Rec, Integer, Integer, TimeWindow> {
        private final int scenario;

        public Count(int scenario) {
            this.scenario = scenario;
        }

        @Override
        public void process(Integer key, Context ctx, Iterable<Rec> elements, Collector<Integer> out) {
            int n = 0;
            for (Rec ignored : elements) {
                n++;
            }
            record("[\"win\"," + scenario + "," + ctx.window().getStart() + "," + n + ","
                    + ctx.currentWatermark() + ",0]");
        }
    }

    /** An event the window operator itself found late (the late filter before it leaves none). */
    public static final class WindowLate extends RichMapFunction<Rec, Integer> {
        private final int scenario;

        public WindowLate(int scenario) {
            this.scenario = scenario;
        }

        @Override
        public Integer map(Rec r) {
            record("[\"wlate\"," + scenario + "," + r.split + "," + r.release + ",1]");
            return 0;
        }
    }

    // ------------------------------------------------------------------ the job

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: DrivenReplay SPEC OUT");
            System.exit(2);
        }
        String specPath = args[0];
        Spec spec = load(specPath);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setParallelism(1);
        env.setBufferTimeout(0); // every record and watermark leaves its task at once
        env.getConfig().setAutoWatermarkInterval(0); // no periodic-emit timer: the ticks drive it
        for (int j = 0; j < spec.scenarios.size(); j++) {
            Scenario sc = spec.scenarios.get(j);
            int p = sc.splits.size();
            DataStream<Rec> splits =
                    env.fromSequence(0, p - 1)
                            .setParallelism(1)
                            .name(sc.name + ": triggers")
                            .partitionCustom(new ByIndex(), new Self())
                            .flatMap(new Driver(specPath, j))
                            .returns(Rec.class)
                            .setParallelism(p)
                            .name(sc.name + ": splits")
                            .assignTimestampsAndWatermarks(new DrivenStrategy(sc.boundMs, sc.idleMs))
                            .setParallelism(p)
                            .name(sc.name + ": watermarks");
            SingleOutputStreamOperator<Rec> onTime =
                    splits.keyBy(new One())
                            .process(new LateFilter(specPath, j))
                            .returns(Rec.class)
                            .name(sc.name + ": late filter");
            OutputTag<Rec> lateTag = new OutputTag<>("window-late-" + j, TypeInformation.of(Rec.class));
            SingleOutputStreamOperator<Integer> windows =
                    onTime.keyBy(new One())
                            .window(TumblingEventTimeWindows.of(Duration.ofMillis(sc.windowMs)))
                            .sideOutputLateData(lateTag)
                            .process(new Count(j))
                            .returns(Integer.class)
                            .name(sc.name + ": windows");
            windows.sinkTo(new DiscardingSink<>());
            windows.getSideOutput(lateTag).map(new WindowLate(j)).returns(Integer.class).sinkTo(new DiscardingSink<>());
        }
        env.execute("ingestwm validate: driven Flink replay");
        StringBuilder doc = new StringBuilder();
        doc.append("{\"version\":\"").append(EnvironmentInformation.getVersion()).append("\",\"runner\":\"java\",");
        int n = spec.scenarios.size();
        doc.append("\"slips_ms\":[").append(String.join(",", java.util.Collections.nCopies(n, "{}"))).append("],");
        doc.append("\"over\":[").append(String.join(",", java.util.Collections.nCopies(n, "[]"))).append("],");
        doc.append("\"sends\":[").append(String.join(",", java.util.Collections.nCopies(n, "{}"))).append("],");
        doc.append("\"turns\":[");
        for (int j = 0; j < n; j++) {
            doc.append(j == 0 ? "" : ",").append(spec.scenarios.get(j).turns.seen);
        }
        doc.append("],\"records\":[");
        synchronized (LINES) {
            doc.append(String.join(",\n", LINES));
        }
        doc.append("]}\n");
        try (Writer w = Files.newBufferedWriter(Paths.get(args[1]), StandardCharsets.UTF_8)) {
            w.write(doc.toString());
        }
        System.exit(0);
    }
}
