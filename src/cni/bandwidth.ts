/**
 * The CNI `bandwidth` capability: per-pod rate limits, read the way the reference
 * `bandwidth` plugin (containernetworking/plugins, plugins/meta/bandwidth) reads them, so
 * a conflist written for it means the same here.
 *
 *  - Keys: ingressRate, ingressBurst, egressRate, egressBurst. Rates in bits per second,
 *    bursts in bits. Ingress is what the pod receives, egress what it sends. Matched
 *    without regard to case, as Go's encoding/json matches them for the reference
 *    plugin: containerd (go-cni's BandWidth has no JSON tags) sends "IngressRate" etc.
 *  - Where: the network config's own top-level keys, else runtimeConfig.bandwidth (what
 *    a runtime derives from kubernetes.io/{ingress,egress}-bandwidth when the plugin
 *    declares `capabilities: {"bandwidth": true}`). As in the reference plugin, any of
 *    the four keys at the top level makes the top level the only source.
 *  - A direction whose rate and burst are both 0 or absent is unlimited: runtimes send
 *    zeros for the direction without an annotation. A rate without a burst, or a burst
 *    without a rate, is refused (the reference plugin refuses both).
 *  - Bounds: a rate from 1 kbit/s to 1 Pbit/s (what kubelet accepts in the annotations),
 *    a burst below 4 GiB (the reference plugin's limit: burst/8 < 2^32 - 1). containerd
 *    sends a burst of 2^32 - 1 bits (512 MiB), CRI-O 2^35 - 9 bits (just under 4 GiB).
 *
 * Only ADD and CHECK validate (podBandwidth): DEL and GC of a pod whose ADD was refused
 * must still succeed. Pure: no Linux calls.
 */
import { invalidConfig } from "./errors";

/** One direction's limit: bits per second, and the bucket's depth in bits. */
export interface RateLimit {
  rate: number;
  burst: number;
}

/** A pod's limits; a direction left out is unlimited. */
export interface Bandwidth {
  ingress?: RateLimit;
  egress?: RateLimit;
}

/** The keys as received, unchecked, and where they came from (for messages). */
export interface BandwidthRequest {
  /** "" for the top level, "runtimeConfig.bandwidth." for the capability. */
  prefix: string;
  values: unknown;
}

export const BANDWIDTH_CAPABILITY = "bandwidth";
export const BANDWIDTH_KEYS = ["ingressRate", "ingressBurst", "egressRate", "egressBurst"] as const;

export const MIN_RATE = 1_000;
export const MAX_RATE = 1e15;
/** The largest burst with burst/8 (integer division) below 2^32 - 1. */
export const MAX_BURST = (2 ** 32 - 1) * 8 - 1;

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** Picks the source: the config's own keys, else the capability's. */
export function readBandwidthRequest(raw: Record<string, unknown>): BandwidthRequest | undefined {
  if (BANDWIDTH_KEYS.some((k) => field(raw, k) !== undefined)) return { prefix: "", values: raw };
  const runtimeConfig = raw.runtimeConfig;
  const capability = isRecord(runtimeConfig) ? runtimeConfig[BANDWIDTH_CAPABILITY] : undefined;
  if (capability === undefined || capability === null) return undefined;
  return { prefix: "runtimeConfig.bandwidth.", values: capability };
}

/**
 * The pod's limits, or undefined when it has none. Code 7 naming the field for anything
 * the reference plugin refuses, and for values no kernel could enforce.
 */
export function podBandwidth(request: BandwidthRequest | undefined): Bandwidth | undefined {
  if (!request) return undefined;
  const { prefix, values } = request;
  if (!isRecord(values)) throw invalidConfig(`"${prefix.slice(0, -1)}" must be an object`);
  const ingress = direction(prefix, values, "ingress");
  const egress = direction(prefix, values, "egress");
  if (!ingress && !egress) return undefined;
  return { ...(ingress ? { ingress } : {}), ...(egress ? { egress } : {}) };
}

function direction(prefix: string, values: Record<string, unknown>, dir: "ingress" | "egress"): RateLimit | undefined {
  const rateKey = `${prefix}${dir}Rate`;
  const burstKey = `${prefix}${dir}Burst`;
  const rate = count(field(values, `${dir}Rate`), rateKey);
  const burst = count(field(values, `${dir}Burst`), burstKey);
  if (rate === 0 && burst === 0) return undefined;
  if (burst === 0) throw invalidConfig(`"${burstKey}" must be set when "${rateKey}" is (bits, e.g. ${rate})`);
  if (rate === 0) throw invalidConfig(`"${rateKey}" must be set when "${burstKey}" is (bits per second)`);
  if (rate < MIN_RATE || rate > MAX_RATE) {
    throw invalidConfig(`"${rateKey}" must be from ${MIN_RATE} to ${MAX_RATE} bits per second; got ${rate}`);
  }
  if (burst > MAX_BURST)
    throw invalidConfig(`"${burstKey}" must be below 4 GiB (at most ${MAX_BURST} bits); got ${burst}`);
  return { rate, burst };
}

/** The value under `key`, else under a key that differs only in case (Go's rule). */
function field(values: Record<string, unknown>, key: string): unknown {
  if (values[key] !== undefined) return values[key];
  const folded = key.toLowerCase();
  const match = Object.keys(values).find((k) => k.toLowerCase() === folded);
  return match === undefined ? undefined : values[match];
}

/** A non-negative integer, 0 when absent. Too large ones are the range checks' to refuse. */
function count(v: unknown, key: string): number {
  if (v === undefined || v === null) return 0;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) {
    throw invalidConfig(`"${key}" must be a non-negative integer; got ${JSON.stringify(v)}`);
  }
  return v;
}
