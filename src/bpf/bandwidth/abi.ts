/**
 * The per-pod rate limits' layout (struct nkc_bandwidth, bpf/lib/bandwidth.h), mirroring
 * bpf/include/nkc_abi.h (whose _Static_asserts pin the sizes used here). Pure encoding
 * and decoding: no kernel calls.
 */

/** NKC_BW_MODE_*: how a pod's egress limit is enforced: policing (a token bucket that
 * drops), or EDT (departure times an fq qdisc on the uplink honours). */
export const BW_MODES = { police: 1, edt: 2 } as const;
export type BandwidthMode = keyof typeof BW_MODES;

/** NKC_BW_IN_*: how a pod's ingress limit is enforced: policing, EDT (departure times the
 * fq on the pod's host device honours), or the host device's shaping qdisc alone. */
export const BW_INGRESS_MODES = { police: 0, edt: 1, qdisc: 2 } as const;
export type IngressMode = keyof typeof BW_INGRESS_MODES;

/** One direction of struct nkc_bandwidth (struct nkc_bw_bucket, 40 bytes). */
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

export const BANDWIDTH_VALUE_SIZE = 88;
const BUCKET_SIZE = 40;
const MAX_U64 = (1n << 64n) - 1n;

/** The burst as time at `rate`: how far a bucket's clock may run ahead of now. */
export function burstNs(rate: bigint, burst: bigint): bigint {
  if (rate === 0n) return 0n;
  const ns = (burst * 1_000_000_000n) / rate;
  return ns > MAX_U64 ? MAX_U64 : ns;
}

/** struct nkc_bandwidth: egress bucket, ingress bucket, u16 mode, u16 ingress_mode, u32
 * paced_ifindex. */
export function bandwidthValue(v: BandwidthValue): Buffer {
  const value = Buffer.alloc(BANDWIDTH_VALUE_SIZE);
  [v.egress, v.ingress].forEach((b, i) => {
    const o = i * BUCKET_SIZE;
    value.writeBigUInt64LE(b.rate, o);
    value.writeBigUInt64LE(b.burst, o + 8);
    value.writeBigUInt64LE(b.burstNs, o + 16);
    value.writeBigUInt64LE(b.clockNs, o + 24);
    value.writeBigUInt64LE(b.dropped, o + 32);
  });
  value.writeUInt16LE(v.mode ? BW_MODES[v.mode] : 0, 2 * BUCKET_SIZE);
  value.writeUInt16LE(BW_INGRESS_MODES[v.ingressMode ?? "police"], 2 * BUCKET_SIZE + 2);
  value.writeUInt32LE(v.pacedIfindex, 2 * BUCKET_SIZE + 4);
  return value;
}

export function decodeBandwidthValue(value: Buffer): BandwidthValue {
  const bucket = (o: number): BucketValue => ({
    rate: value.readBigUInt64LE(o),
    burst: value.readBigUInt64LE(o + 8),
    burstNs: value.readBigUInt64LE(o + 16),
    clockNs: value.readBigUInt64LE(o + 24),
    dropped: value.readBigUInt64LE(o + 32),
  });
  const mode = value.readUInt16LE(2 * BUCKET_SIZE);
  const ingressMode = value.readUInt16LE(2 * BUCKET_SIZE + 2);
  return {
    egress: bucket(0),
    ingress: bucket(BUCKET_SIZE),
    mode: (Object.keys(BW_MODES) as BandwidthMode[]).find((m) => BW_MODES[m] === mode),
    ingressMode: (Object.keys(BW_INGRESS_MODES) as IngressMode[]).find((m) => BW_INGRESS_MODES[m] === ingressMode),
    pacedIfindex: value.readUInt32LE(2 * BUCKET_SIZE + 4),
  };
}
