/**
 * The per-pod rate limits (nkc_bandwidth, bpf/lib/bandwidth.h), keyed by the pod's host
 * ifindex: the key both directions already hold (the pod's own program has it in
 * skb->ifindex, every path into the pod has the endpoint entry's host_ifindex), the key
 * of the counters and flow tables, so DEL and GC forget it with them. Userspace writes
 * an entry at ADD (rates, bursts, the mode), before the pod's program runs, and deletes
 * it at DEL; the programs own the clocks and the drop counts. A pod without limits has
 * no entry.
 */
import type { Bandwidth, RateLimit } from "../../cni/bandwidth";
import { ifindexKey } from "../fastpath/abi";
import type { BpfMap } from "../loader/maps";
import {
  type BandwidthMode,
  type BucketValue,
  bandwidthValue,
  burstNs,
  decodeBandwidthValue,
  type IngressMode,
} from "./abi";

/** A pod's limits as the map holds them, with what the programs dropped. */
export interface PodLimits {
  /** How egress is enforced. */
  mode: BandwidthMode | undefined;
  /** How ingress is enforced. */
  ingressMode: IngressMode | undefined;
  /** EDT: the uplink whose fq releases the pod's departures; 0 otherwise. */
  pacedIfindex: number;
  ingress: (RateLimit & { dropped: number }) | undefined;
  egress: (RateLimit & { dropped: number }) | undefined;
}

const bucket = (limit: RateLimit | undefined): BucketValue => {
  const rate = BigInt(limit?.rate ?? 0);
  const burst = BigInt(limit?.burst ?? 0);
  return { rate, burst, burstNs: burstNs(rate, burst), clockNs: 0n, dropped: 0n };
};

const limitOf = (b: BucketValue) =>
  b.rate === 0n ? undefined : { rate: Number(b.rate), burst: Number(b.burst), dropped: Number(b.dropped) };

/** How a pod's egress is limited: paced through `pacedIfindex`'s fq, or policed. */
export type EgressEnforcement = { mode: "edt"; pacedIfindex: number } | { mode: "police" };

/** How a pod's ingress is limited: paced by the fq on its host device, shaped by the
 * qdisc there alone, or policed. */
export type IngressEnforcement = { mode: IngressMode };

/** Gives the pod a fresh entry: full buckets, nothing dropped. */
export function setPodLimits(
  map: BpfMap,
  hostIfindex: number,
  bw: Bandwidth,
  egress: EgressEnforcement,
  ingress: IngressEnforcement = { mode: "police" },
): void {
  map.update(
    ifindexKey(hostIfindex),
    bandwidthValue({
      egress: bucket(bw.egress),
      ingress: bucket(bw.ingress),
      mode: egress.mode,
      ingressMode: ingress.mode,
      pacedIfindex: egress.mode === "edt" ? egress.pacedIfindex : 0,
    }),
  );
}

export function podLimits(map: BpfMap, hostIfindex: number): PodLimits | undefined {
  const value = map.lookup(ifindexKey(hostIfindex));
  if (!value) return undefined;
  const v = decodeBandwidthValue(value);
  return {
    mode: v.mode,
    ingressMode: v.ingressMode,
    pacedIfindex: v.pacedIfindex,
    ingress: limitOf(v.ingress),
    egress: limitOf(v.egress),
  };
}

export function deletePodLimits(map: BpfMap, hostIfindex: number): boolean {
  return map.delete(ifindexKey(hostIfindex));
}

/** What differs between the limits a pod should have and those it has; empty when equal. */
export function limitMismatches(want: Bandwidth | undefined, have: PodLimits | undefined): string[] {
  const problems: string[] = [];
  for (const dir of ["ingress", "egress"] as const) {
    const w = want?.[dir];
    const h = have?.[dir];
    if (!w && !h) continue;
    if (!w) problems.push(`${dir} is limited to ${h?.rate} bit/s, the config has no limit`);
    else if (!h) problems.push(`${dir} limit of ${w.rate} bit/s is missing`);
    else if (w.rate !== h.rate || w.burst !== h.burst) {
      problems.push(`${dir} is ${h.rate} bit/s burst ${h.burst} bits, the config asks ${w.rate} burst ${w.burst}`);
    }
  }
  return problems;
}
