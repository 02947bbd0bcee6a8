/**
 * Pod rate limits (the CNI `bandwidth` capability): what a limited pod achieves, and
 * what a bulk flow through its limit does to the latency of its other connections.
 *
 * Variants (bench/lib/bandwidth-pods.ts), each on a two-node cluster of its own: this
 * plugin (veth; in the guest also netkit) against the reference plugins chained as a
 * conflist chains them (ptp, then bandwidth). The client pods on node A are limited, the
 * server b1 on node B is not, so each figure is the client's limit at work. Every limit
 * is measured with each burst (BURSTS_MS), a pod each:
 *
 *   rate       iperf3 a1 → b1 (the pod's egress) and a1 ← b1 (`-R`, its ingress) at
 *              10, 100 and 1000 Mbit/s; the receiver's rate
 *   latency    netperf TCP_RR a1 → b1 at 10 and 100 Mbit/s, p50/p90/p99 and
 *              transactions/s: alone (unloaded), and 1 s into an iperf3 bulk flow that
 *              outlasts it (loaded), a1 → b1 and then b1 → a1: the RR's requests queue,
 *              or are dropped, behind the bulk flow's packets in the pod's egress limit,
 *              its responses in its ingress limit
 *
 * Rounds interleave the variants (every variant and limit, then the next round; the
 * variants' order turns each round), so a noisy stretch of the machine hits all alike;
 * every round's value is kept and the report takes medians.
 */

import { spawnSync } from "node:child_process";
import { netperfFields, startNetserver } from "../../test/support/netperf";
import {
  BURSTS_MS,
  type BwCluster,
  type BwVariant,
  buildBwCluster,
  type PodModes,
  type Shape,
  shapeKey,
  shapesOf,
} from "./bandwidth-pods";
import { tick } from "./cleanup";
import { iperf3, iperf3Background, startIperf3Server, waitIperf3Idle } from "./iperf3";
import { turnedBy } from "./stats";

/** Limits, Mbit/s each way: the rate test's, and the latency test's. */
export const RATE_LIMITS = [10, 100, 1000];
export const LATENCY_LIMITS = [10, 100];

/** Which way a bulk flow crosses the pod's limits: a1 → b1 is its egress, b1 → a1 its ingress. */
export const DIRECTIONS = ["egress", "ingress"] as const;
export type Direction = (typeof DIRECTIONS)[number];

/** netperf's output selectors for TCP_RR: latencies in µs, then transactions/s. */
const RR_FIELDS = ["P50_LATENCY", "P90_LATENCY", "P99_LATENCY", "THROUGHPUT"];
/** The bulk flow starts this long before TCP_RR and runs as long again after its end,
 * so netperf's own connection setup and teardown also see the load. */
const LEAD_S = 1;

export interface RateSamples {
  /** What b1 received from a1 (the pod's egress), Mbit/s. */
  egress: number[];
  /** What a1 received from b1 (its ingress), Mbit/s. */
  ingress: number[];
  /** The sender's TCP retransmissions per run (a policer's drops show here). */
  egressRetransmits: number[];
  ingressRetransmits: number[];
}

export interface LatencySamples {
  /** TCP_RR round trip percentiles, µs. */
  p50: number[];
  p90: number[];
  p99: number[];
  /** Transactions/s. */
  tps: number[];
}

/** TCP_RR beside a bulk flow, and what the bulk flow's receiver counted, Mbit/s. */
export type LoadedSamples = LatencySamples & { bulk: number[] };

export interface LatencySet {
  unloaded: LatencySamples;
  /** Beside a bulk flow through the pod's egress limit (a1 → b1) and through its ingress limit (b1 → a1). */
  loaded: Record<Direction, LoadedSamples>;
}

/** Sample records are keyed by shapeKey (bandwidth-pods.ts): "10-300ms". */
export interface BandwidthRun {
  rounds: number;
  seconds: number;
  /** The buckets' depths, ms at the rate: every limit ran with each. */
  burstsMs: number[];
  limits: number[];
  latencyLimits: number[];
  /** The variants, in round 1's order. */
  variants: BwVariant[];
  /** How our plugin enforced each pod's limits, each way, by variant and shape. */
  modes: Partial<Record<BwVariant, Record<string, PodModes>>>;
  rate: Partial<Record<BwVariant, Record<string, RateSamples>>>;
  latency: Partial<Record<BwVariant, Record<string, LatencySet>>>;
  /** Debian's containernetworking-plugins version, when the reference ran. */
  referencePackage?: string;
  errors: string[];
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const latencySamples = (): LatencySamples => ({ p50: [], p90: [], p99: [], tps: [] });
const loadedSamples = (): LoadedSamples => ({ ...latencySamples(), bulk: [] });

/** A Debian package's installed version ("" when unknown): `dpkg-query -W` prints "name\tversion". */
function packageVersion(name: string): string {
  const r = spawnSync("dpkg-query", ["-W", name], { encoding: "utf8" });
  return r.status === 0 ? (r.stdout.trim().split("\t")[1] ?? "") : "";
}

/** The run's sample arrays, every variant and shape, empty. */
function emptyRun(variants: BwVariant[], rounds: number, seconds: number): BandwidthRun {
  const run: BandwidthRun = {
    rounds,
    seconds,
    burstsMs: BURSTS_MS,
    limits: RATE_LIMITS,
    latencyLimits: LATENCY_LIMITS,
    variants,
    modes: {},
    rate: {},
    latency: {},
    errors: [],
  };
  for (const v of variants) {
    run.rate[v] = Object.fromEntries(
      shapesOf(RATE_LIMITS, BURSTS_MS).map((s) => [
        shapeKey(s),
        { egress: [], ingress: [], egressRetransmits: [], ingressRetransmits: [] },
      ]),
    );
    run.latency[v] = Object.fromEntries(
      shapesOf(LATENCY_LIMITS, BURSTS_MS).map((s) => [
        shapeKey(s),
        { unloaded: latencySamples(), loaded: { egress: loadedSamples(), ingress: loadedSamples() } },
      ]),
    );
  }
  if (variants.includes("reference")) run.referencePackage = packageVersion("containernetworking-plugins");
  return run;
}

function client(c: BwCluster, s: Shape) {
  const pod = c.clients.get(shapeKey(s));
  if (!pod) throw new Error(`${c.variant}: no client pod for ${shapeKey(s)}`);
  return pod;
}

const what = (c: BwCluster, s: Shape) => `${c.variant} ${s.mbit} Mbit/s, ${s.burstMs} ms burst`;

function pushRr(s: LatencySamples, values: number[]): void {
  const [p50, p90, p99, tps] = values.length === RR_FIELDS.length ? values : RR_FIELDS.map(() => Number.NaN);
  s.p50.push(p50 as number);
  s.p90.push(p90 as number);
  s.p99.push(p99 as number);
  s.tps.push(tps as number);
}

/** TCP_RR from the shape's client pod to b1, alone or beside a bulk flow one way. */
async function latencyRun(c: BwCluster, s: Shape, seconds: number, load: Direction | undefined, run: BandwidthRun) {
  const pod = client(c, s);
  const set = run.latency[c.variant]?.[shapeKey(s)];
  if (!set) return;
  const rrRun = () => {
    const rr = netperfFields(pod.netns, c.server.ip, "TCP_RR", seconds, RR_FIELDS);
    if (rr.error) run.errors.push(`${what(c, s)} ${load ? `loaded (${load})` : "unloaded"}: ${rr.error}`);
    return rr.values;
  };
  if (!load) {
    pushRr(set.unloaded, rrRun());
    return;
  }
  serverIdle(c, s, run);
  const bulk = iperf3Background(pod.netns, c.server.ip, seconds + 2 * LEAD_S, load === "ingress");
  await sleep(LEAD_S * 1000);
  const values = rrRun();
  const b = await bulk;
  if (b.error) run.errors.push(`${what(c, s)} bulk flow (${load}): ${b.error}`);
  // Without its bulk flow the run was not loaded: no figure rather than an unloaded one filed as loaded.
  pushRr(set.loaded[load], b.error ? [] : values);
  set.loaded[load].bulk.push(b.mbits);
}

/** iperf3's server between tests before the next one starts (iperf3.ts, waitIperf3Idle). */
function serverIdle(c: BwCluster, s: Shape, run: BandwidthRun): void {
  if (!waitIperf3Idle(c.server.netns)) run.errors.push(`${what(c, s)}: iperf3's server still busy after 5 s`);
}

function rateRun(c: BwCluster, s: Shape, seconds: number, run: BandwidthRun): void {
  const pod = client(c, s);
  const slot = run.rate[c.variant]?.[shapeKey(s)];
  if (!slot) return;
  for (const reverse of [false, true]) {
    serverIdle(c, s, run);
    const r = iperf3(pod.netns, c.server.ip, seconds, reverse);
    if (r.error) run.errors.push(`${what(c, s)}: ${r.error}`);
    (reverse ? slot.ingress : slot.egress).push(r.mbits);
    (reverse ? slot.ingressRetransmits : slot.egressRetransmits).push(r.retransmits);
  }
}

/** Every client pod reaches b1's servers: a short untimed run each, which also settles
 * neighbours and the servers' first fork. A failure here is a broken setup, not a figure. */
function warmUp(c: BwCluster): void {
  for (const [key, pod] of c.clients) {
    const rr = netperfFields(pod.netns, c.server.ip, "TCP_RR", 1, RR_FIELDS);
    if (rr.error) throw new Error(`rate limits, ${c.variant} ${key} warm-up: ${rr.error}`);
  }
  const [, pod] = [...c.clients][0] ?? [];
  if (!pod) return;
  const r = iperf3(pod.netns, c.server.ip, 1, false);
  if (r.error) throw new Error(`rate limits, ${c.variant} warm-up: ${r.error}`);
}

export async function measureBandwidth(opts: {
  variants: BwVariant[];
  rounds: number;
  seconds: number;
}): Promise<BandwidthRun> {
  const run = emptyRun(opts.variants, opts.rounds, opts.seconds);
  const rateShapes = shapesOf(RATE_LIMITS, BURSTS_MS);
  const latencyShapes = shapesOf(LATENCY_LIMITS, BURSTS_MS);
  const clusters: BwCluster[] = [];
  for (const v of opts.variants) {
    // The latency limits are among the rate limits: one pod per limit and burst serves both tests.
    const c = buildBwCluster(v, rateShapes);
    clusters.push(c);
    if (v !== "reference") run.modes[v] = c.modes;
    startIperf3Server(c.fx, c.server.netns);
    startNetserver(c.fx, c.server.netns);
    await tick();
  }
  for (const c of clusters) {
    warmUp(c);
    await tick();
  }

  for (let round = 0; round < opts.rounds; round++) {
    const t0 = Date.now();
    const order = turnedBy(clusters, round);
    for (const s of rateShapes) {
      for (const c of order) {
        await tick();
        rateRun(c, s, opts.seconds, run);
      }
    }
    // Unloaded before loaded: what a bulk flow leaves queued never meets its own pod's unloaded run.
    for (const s of latencyShapes) {
      for (const c of order) {
        for (const load of [undefined, ...DIRECTIONS]) {
          await tick();
          await latencyRun(c, s, opts.seconds, load, run);
        }
      }
    }
    process.stderr.write(
      `  rate limits round ${round + 1}/${opts.rounds} (${((Date.now() - t0) / 1000).toFixed(0)} s)\n`,
    );
  }

  for (const c of clusters) {
    run.errors.push(...c.teardown());
    c.fx.cleanup();
  }
  return run;
}
