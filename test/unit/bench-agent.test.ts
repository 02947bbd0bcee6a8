/**
 * The agent section's targets (bench/lib/agent-report.ts), judged from a run's figures.
 */
import { describe, expect, it } from "vitest";
import { agentSection, agentTargets } from "../../bench/lib/agent-report";
import type { AgentScaleRun, ServiceScale } from "../../bench/lib/agent-scale";

const svc = (services: number, change: number[], settledMb: number, peakMb: number): ServiceScale => ({
  services,
  endpoints: 10,
  firstSyncMs: 1000,
  addMs: change,
  withdrawMs: change,
  rss: { afterSyncMb: peakMb, settledMb, peakMb },
});

const run = (services: ServiceScale[]): AgentScaleRun => ({
  settleSeconds: 8,
  services,
  nodes: [
    {
      nodes: 4000,
      firstSyncMs: 900,
      addMs: [3, 5],
      moveMs: [2, 2],
      deleteMs: [1, 9],
      rss: { afterSyncMb: 100, settledMb: 90, peakMb: 101 },
    },
  ],
  errors: [],
});

describe("the agent's targets", () => {
  it("are met by medians within bounds, and missed by growth, latency or memory", () => {
    const ok = agentTargets(
      run([svc(500, [10, 12], 80, 90), svc(5000, [14, 200, 15], 140, 185), svc(15000, [19, 18], 170, 210)]),
    );
    expect(ok.map((t) => t.met)).toEqual([true, true, true, true]);
    const bad = agentTargets(
      run([svc(500, [10, 12], 80, 90), svc(5000, [150, 120], 151, 190), svc(15000, [30, 30], 170, 210)]),
    );
    expect(bad.map((t) => t.met)).toEqual([false, false, false, true]);
    expect(bad[1]?.measured).toBe("settled 151 MB, peak 190 MB");
    expect(agentTargets(undefined)).toEqual([]);
  });

  it("renders a table per kind with medians and spreads", () => {
    const text = agentSection(run([svc(5000, [14, 200, 15], 140, 185)]));
    expect(text).toContain("| 5,000 × 10 | 1000 ms | 15 ms (14–200) | 15 ms (14–200) | 185 MB | 140 MB | 185 MB |");
    expect(text).toContain("| 4,000 | 900 ms | 4 ms (3–5) | 2 ms (2–2) | 5 ms (1–9) | 100 MB | 90 MB | 101 MB |");
  });
});
