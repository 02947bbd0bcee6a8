/**
 * Flow counters, from the pods' flow tables to records: while flows are recorded the
 * programs count each remembered flow's packets and bytes in its entry (struct
 * nkc_pol_ct). The agent reads every table now and then; between two reads a flow's
 * counts grew by a delta (for the aggregates' windows), and a flow ended when its entry
 * stopped vouching for it (its last packet older than its kind's lifetime, as the
 * programs judge), left the table (its pod went, or the LRU made room) or was taken by
 * another flow of the same 5-tuple (its counts fell, or a closing TCP entry opened
 * again). An ended flow is told once, with its totals. Pure: the caller reads the tables
 * and passes the programs' clock.
 */
import type { ByDirection, CountedFlow } from "../../bpf/index";

export interface CountedDelta {
  ifindex: number;
  flow: CountedFlow;
  packets: ByDirection;
  bytes: ByDirection;
}

export interface EndedFlow {
  ifindex: number;
  /** As the table last showed it: its totals. */
  flow: CountedFlow;
}

interface Tracked {
  ifindex: number;
  flow: CountedFlow;
  /** Told as ended already; its entry is still in the table, dead. */
  ended: boolean;
}

const idOf = (ifindex: number, f: CountedFlow): string =>
  `${ifindex} ${f.family} ${f.proto} ${f.a.ip} ${f.a.port} ${f.b.ip} ${f.b.port}`;

const less = (a: ByDirection, b: ByDirection): boolean => a.egress < b.egress || a.ingress < b.ingress;
const minus = (a: ByDirection, b: ByDirection): ByDirection => ({
  egress: a.egress - b.egress,
  ingress: a.ingress - b.ingress,
});
const ZERO: ByDirection = { egress: 0n, ingress: 0n };

/** A later entry is another flow than the one tracked under its 5-tuple. */
function replaced(before: CountedFlow, now: CountedFlow): boolean {
  return less(now.packets, before.packets) || less(now.bytes, before.bytes) || (before.closing && !now.closing);
}

export class FlowEnds {
  private readonly tracked = new Map<string, Tracked>();

  /** Flows followed now (for /status). */
  get size(): number {
    return this.tracked.size;
  }

  /** One read of every table, at `nowNs` on the programs' clock (CLOCK_MONOTONIC). */
  scan(tables: ReadonlyMap<number, CountedFlow[]>, nowNs: bigint): { deltas: CountedDelta[]; ended: EndedFlow[] } {
    const deltas: CountedDelta[] = [];
    const ended: EndedFlow[] = [];
    const seen = new Set<string>();
    for (const [ifindex, flows] of tables) {
      for (const flow of flows) {
        const id = idOf(ifindex, flow);
        seen.add(id);
        let before = this.tracked.get(id);
        if (before && replaced(before.flow, flow)) {
          if (!before.ended) ended.push({ ifindex, flow: before.flow });
          before = undefined;
        }
        const packets = minus(flow.packets, before?.flow.packets ?? ZERO);
        const bytes = minus(flow.bytes, before?.flow.bytes ?? ZERO);
        if (packets.egress + packets.ingress + bytes.egress + bytes.ingress > 0n)
          deltas.push({ ifindex, flow, packets, bytes });
        const alive = nowNs < flow.expiresNs;
        const told = before?.ended === true;
        if (!alive && !told) ended.push({ ifindex, flow });
        this.tracked.set(id, { ifindex, flow, ended: !alive });
      }
    }
    for (const [id, t] of this.tracked) {
      if (seen.has(id)) continue;
      if (!t.ended) ended.push({ ifindex: t.ifindex, flow: t.flow });
      this.tracked.delete(id);
    }
    return { deltas, ended };
  }
}
