/**
 * The per-pod rate limits' layout (struct nkc_bandwidth of bpf/include/nkc_abi.h, read
 * by bpf/lib/bandwidth.h), declared once as a field table (loader/struct.ts), with the
 * encodings callers use. Pure: no kernel calls.
 */
import { type StructLayout, struct, u16, u32, u64 } from "../loader/struct";

/** NKC_BW_MODE_*: how a pod's egress limit is enforced: policing (a token bucket that
 * drops), or EDT (departure times an fq qdisc on the uplink honours). */
export const BW_MODES = { police: 1, edt: 2 } as const;
export type BandwidthMode = keyof typeof BW_MODES;

/** NKC_BW_IN_*: how a pod's ingress limit is enforced: policing, EDT (departure times the
 * fq on the pod's host device honours), or the host device's shaping qdisc alone. */
export const BW_INGRESS_MODES = { police: 0, edt: 1, qdisc: 2 } as const;
export type IngressMode = keyof typeof BW_INGRESS_MODES;

/** One direction of struct nkc_bandwidth (struct nkc_bw_bucket). */
export interface BucketValue {
  /** Bits per second; 0: not limited. */
  rate: bigint;
  /** Bits. */
  burst: bigint;
  burstNs: bigint;
  clockNs: bigint;
  dropped: bigint;
}

export interface BandwidthValue {
  egress: BucketValue;
  ingress: BucketValue;
  /** Egress. */
  mode: BandwidthMode | undefined;
  ingressMode: IngressMode | undefined;
  /** EDT: the uplink whose fq releases the departures; 0 otherwise. */
  pacedIfindex: number;
}

/** One direction's token bucket (or departure clock). */
export const BW_BUCKET = struct("nkc_bw_bucket", { rate: u64, burst: u64, burstNs: u64, clockNs: u64, dropped: u64 });
/** nkc_bandwidth's value: both directions, how each is enforced, the uplink pacing egress. */
export const BANDWIDTH = struct("nkc_bandwidth", {
  egress: BW_BUCKET,
  ingress: BW_BUCKET,
  mode: u16,
  ingressMode: u16,
  pacedIfindex: u32,
});

/** The rate limits' structs, which the node's objects lay out. */
export const BANDWIDTH_STRUCTS: readonly StructLayout[] = [BW_BUCKET, BANDWIDTH];

const MAX_U64 = (1n << 64n) - 1n;

/** The burst as time at `rate`: how far a bucket's clock may run ahead of now. */
export function burstNs(rate: bigint, burst: bigint): bigint {
  if (rate === 0n) return 0n;
  const ns = (burst * 1_000_000_000n) / rate;
  return ns > MAX_U64 ? MAX_U64 : ns;
}

export function bandwidthValue(v: BandwidthValue): Buffer {
  return BANDWIDTH.encode({
    egress: v.egress,
    ingress: v.ingress,
    mode: v.mode ? BW_MODES[v.mode] : 0,
    ingressMode: BW_INGRESS_MODES[v.ingressMode ?? "police"],
    pacedIfindex: v.pacedIfindex,
  });
}

export function decodeBandwidthValue(value: Buffer): BandwidthValue {
  const v = BANDWIDTH.decode(value);
  return {
    egress: v.egress,
    ingress: v.ingress,
    mode: (Object.keys(BW_MODES) as BandwidthMode[]).find((m) => BW_MODES[m] === v.mode),
    ingressMode: (Object.keys(BW_INGRESS_MODES) as IngressMode[]).find((m) => BW_INGRESS_MODES[m] === v.ingressMode),
    pacedIfindex: v.pacedIfindex,
  };
}
