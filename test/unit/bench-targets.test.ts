/**
 * The bench's targets (bench/lib/targets-report.ts), judged from a run's figures: the veth
 * fast path against bridge with the rounds' spread, netkit's rates only where netkit was
 * timed, and the plugin's own work as its ADD+DEL p50 above the floor of the same run.
 */
import { describe, expect, it } from "vitest";
import type { KernelFloor } from "../../bench/lib/kernel-floor";
import type { PathId } from "../../bench/lib/paths";
import type { BenchResult } from "../../bench/lib/result";
import { summarize } from "../../bench/lib/stats";
import { type Target, targets } from "../../bench/lib/targets-report";
import { cycle } from "./fixtures/bench-result";

/** TCP_RR and TCP_CRR per round, the same for both placements. */
function netperf(rates: Partial<Record<PathId, number[]>>): BenchResult["netperf"] {
  const samples: Record<string, Record<string, Record<string, number[]>>> = {};
  for (const [id, perRound] of Object.entries(rates)) {
    const tests = { TCP_RR: perRound, TCP_CRR: perRound };
    samples[id] = { across: tests, same: tests };
  }
  return {
    rounds: 3,
    seconds: 2,
    tests: ["TCP_RR", "TCP_CRR"],
    placements: ["across", "same"],
    order: Object.keys(rates) as PathId[],
    crrConnections: {},
    samples: samples as NonNullable<BenchResult["netperf"]>["samples"],
    errors: [],
  };
}

/** A floor of 60 ms: link 20, two starts 16, pair 24. */
const FLOOR: KernelFloor = {
  tcxAttachMs: summarize([10]),
  linkReleaseMs: summarize([10]),
  bunBareMs: summarize([8]),
  vethCreateMs: summarize([12]),
  vethDeleteMs: summarize([12]),
};

function hostRun(over: Partial<BenchResult>): BenchResult {
  return { schema: 1, kind: "host", ...over } as BenchResult;
}

const find = (ts: Target[], text: string) => ts.filter((t) => t.target.includes(text));

describe("bench targets", () => {
  it("holds the veth fast path to 1.05× bridge by the median, and says how far the rounds spread", () => {
    const ts = targets(
      hostRun({ netperf: netperf({ host: [100, 100, 100], bridge: [100, 100, 100], veth: [80, 106, 120] }) }),
    );
    const rows = find(ts, "veth fast path ≥ 1.05× bridge");
    expect(rows).toHaveLength(4);
    expect(rows[0]?.measured).toBe(
      "1.06× (per round 0.80–1.20, −25 % / +13 % about the median); host ↔ host itself: 1.00×",
    );
    expect(rows.every((t) => t.met === true)).toBe(true);
    const below = targets(hostRun({ netperf: netperf({ host: [100], bridge: [100], veth: [104] }) }));
    expect(find(below, "veth fast path").every((t) => t.met === false)).toBe(true);
  });

  it("judges netkit's rates only where netkit pods were timed, and invents nothing elsewhere", () => {
    const [untimed] = find(
      targets(hostRun({ netperf: netperf({ host: [1], bridge: [1], veth: [1] }) })),
      "netkit pods at",
    );
    expect(untimed?.met).toBeUndefined();
    expect(untimed?.measured).toMatch(/^not timed/);
    const timed = find(
      targets(hostRun({ netperf: netperf({ host: [100, 100], netkit: [95, 101] }) })),
      "netkit pods at",
    );
    expect(timed).toHaveLength(4);
    expect(timed.every((t) => t.met === true)).toBe(true);
    const slower = find(
      targets(hostRun({ netperf: netperf({ host: [100, 100], netkit: [95, 99] }) })),
      "netkit pods at",
    );
    expect(slower.every((t) => t.met === false)).toBe(true);
  });

  it("counts the plugin's own work as its ADD+DEL p50 above the floor, for the Bun executables", () => {
    const controlPlane = {
      cycles: { ptp: cycle(40), "ours-embedded": cycle(69), "ours-host-local": cycle(71), "ours-node": cycle(150) },
      storms: {},
      rss: {},
      kernelFloor: FLOOR,
    };
    const rows = find(targets(hostRun({ controlPlane })), "the floor ≤ 10 ms");
    expect(rows.map((t) => [t.measured, t.met])).toEqual([
      ["69 ms − 60 ms = 9.0 ms", true],
      ["71 ms − 60 ms = 11 ms", false],
    ]);
    const againstPtp = find(targets(hostRun({ controlPlane })), "≤ 1.0× ptp");
    expect(againstPtp.map((t) => [t.measured, t.met])).toEqual([["1.73× (69 ms against 40 ms)", false]]);
    const deferred = { ...controlPlane, cycles: { ...controlPlane.cycles, "ours-deferred": cycle(38) } };
    expect(find(targets(hostRun({ controlPlane: deferred })), "≤ 1.0× ptp").map((t) => t.met)).toEqual([false, true]);
    const older = find(targets(hostRun({ controlPlane: { ...controlPlane, kernelFloor: undefined } })), "the floor");
    expect(older.map((t) => t.met)).toEqual([undefined, undefined]);
    expect(older[0]?.measured).toBe("69 ms; no floor measured in this run");
  });
});
