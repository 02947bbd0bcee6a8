/**
 * The data plane: crossings per packet (exact) and netperf (noisy, hence interleaved
 * round by round: A B C D, A B C D, ... and reported as medians with their spread).
 */

import { type NetperfTest, netperf, startNetserver } from "../../test/support/netperf";
import { tick } from "./cleanup";
import {
  type NetifRxCounter,
  type PerPacket,
  PING_LEN,
  perPacket,
  pingSized,
  RR_REQUEST,
  RR_REQUEST_LEN,
  RR_RESPONSE,
  RR_RESPONSE_LEN,
} from "./crossings";
import type { BenchPath, PathId, Placement } from "./paths";

export function startServers(paths: BenchPath[]): void {
  for (const p of paths) for (const ns of new Set(p.servers)) startNetserver(p.fx, ns);
}

export interface CrossingResult {
  path: PathId;
  placement: Placement;
  /** Echo requests and replies together (the same length both ways). */
  ping: PerPacket;
  /** TCP_RR requests (client → server) and responses (server → client), one segment each. */
  rrRequest: PerPacket;
  rrResponse: PerPacket;
  lostEvents: number;
}

export async function measureCrossings(
  paths: BenchPath[],
  counter: NetifRxCounter,
  opts: { pings: number; transactions: number },
): Promise<CrossingResult[]> {
  const out: CrossingResult[] = [];
  for (const p of paths) {
    for (const placement of ["across", "same"] as const) {
      await tick();
      const { client, server } = p.pairs[placement];
      // Warm up: neighbours resolved, flows known, netserver forked once.
      pingSized(client.netns, server.ip, 5);
      netperf(client.netns, server.ip, "TCP_RR", -50, ["-r", `${RR_REQUEST},${RR_RESPONSE}`]);
      const pingEvents = counter.count(() => pingSized(client.netns, server.ip, opts.pings));
      let rrError: string | undefined;
      const rrEvents = counter.count(() => {
        const r = netperf(client.netns, server.ip, "TCP_RR", -opts.transactions, [
          "-r",
          `${RR_REQUEST},${RR_RESPONSE}`,
        ]);
        rrError = r.error;
      });
      if (rrError) throw new Error(`crossings, ${p.id} ${placement}: ${rrError}`);
      const result: CrossingResult = {
        path: p.id,
        placement,
        ping: perPacket(pingEvents.byLen.get(PING_LEN), 2 * opts.pings),
        rrRequest: perPacket(rrEvents.byLen.get(RR_REQUEST_LEN), opts.transactions),
        rrResponse: perPacket(rrEvents.byLen.get(RR_RESPONSE_LEN), opts.transactions),
        lostEvents: pingEvents.lost + rrEvents.lost,
      };
      if (result.lostEvents > 0) {
        process.stderr.write(
          `  warning: ${result.lostEvents} trace events lost (buffer overrun) on ${p.id} ${placement}\n`,
        );
      }
      out.push(result);
      process.stderr.write(
        `  crossings ${p.id.padEnd(12)} ${placement.padEnd(6)} ping ${result.ping.total.toFixed(3)}/packet, ` +
          `TCP_RR request ${result.rrRequest.total.toFixed(3)}, response ${result.rrResponse.total.toFixed(3)}\n`,
      );
    }
  }
  return out;
}

/** Connections in the TCP_CRR sizing run. */
const CRR_PROBE = 1000;

export type Samples = Partial<Record<PathId, Partial<Record<Placement, Partial<Record<NetperfTest, number[]>>>>>>;

export interface NetperfRun {
  rounds: number;
  seconds: number;
  tests: NetperfTest[];
  placements: Placement[];
  order: PathId[];
  /**
   * TCP_CRR runs a fixed number of connections per path and placement, sized to last about
   * `seconds` from the previous run's rate (these are the last sizes used).
   */
  crrConnections: Record<string, number>;
  samples: Samples;
  errors: string[];
}

export async function measureNetperf(
  paths: BenchPath[],
  opts: { rounds: number; seconds: number; tests: NetperfTest[]; placements: Placement[] },
): Promise<NetperfRun> {
  const samples: Samples = {};
  const errors: string[] = [];
  // One short untimed pass: first connections, netserver's first fork, caches. It also
  // sizes TCP_CRR, which runs a fixed number of connections: with a time limit, netperf
  // waits out netserver's 4 s padding timer after every TCP_CRR test.
  const crrCount = new Map<string, number>();
  for (const p of paths) {
    for (const pl of opts.placements) {
      await tick();
      const { client, server } = p.pairs[pl];
      netperf(client.netns, server.ip, "TCP_RR", 1);
      const rate = netperf(client.netns, server.ip, "TCP_CRR", -CRR_PROBE).value;
      const n = Number.isFinite(rate) ? Math.round(rate * opts.seconds) : CRR_PROBE;
      crrCount.set(`${p.id}/${pl}`, Math.max(CRR_PROBE, Math.min(n, 500_000)));
    }
  }
  for (let round = 0; round < opts.rounds; round++) {
    const t0 = Date.now();
    for (const test of opts.tests) {
      for (const placement of opts.placements) {
        for (const p of paths) {
          await tick();
          const { client, server } = p.pairs[placement];
          const length = test === "TCP_CRR" ? -(crrCount.get(`${p.id}/${placement}`) ?? CRR_PROBE) : opts.seconds;
          const r = netperf(client.netns, server.ip, test, length);
          if (r.error) errors.push(`round ${round + 1}: ${r.error}`);
          // Keep TCP_CRR runs near `seconds` as the path's rate moves: size the next one from this one.
          if (test === "TCP_CRR" && Number.isFinite(r.value)) {
            crrCount.set(
              `${p.id}/${placement}`,
              Math.max(CRR_PROBE, Math.min(Math.round(r.value * opts.seconds), 500_000)),
            );
          }
          const byPlacement = samples[p.id] ?? {};
          samples[p.id] = byPlacement;
          const byTest = byPlacement[placement] ?? {};
          byPlacement[placement] = byTest;
          byTest[test] = [...(byTest[test] ?? []), r.value];
        }
      }
    }
    process.stderr.write(`  netperf round ${round + 1}/${opts.rounds} (${((Date.now() - t0) / 1000).toFixed(0)} s)\n`);
  }
  return { ...opts, order: paths.map((p) => p.id), crrConnections: Object.fromEntries(crrCount), samples, errors };
}
