/**
 * Rate-limit runs written before every limit was measured with two bursts and both
 * directions under load, read as today's BandwidthRun, so that bench/results/ keeps
 * rendering: the newest run of a kind (the guest's, say) may be older than this shape.
 *
 * Those runs had one burst (`burstSeconds`), records keyed by the limit alone ("10"),
 * only the egress mode (a string) and one loaded TCP_RR, beside a bulk flow a1 → b1.
 */
import type { BandwidthRun, LatencySamples, LatencySet, LoadedSamples } from "./bandwidth";
import type { BwVariant, PodModes } from "./bandwidth-pods";

type ByVariant<T> = Partial<Record<BwVariant, Record<string, T>>>;

export interface OlderRun extends Omit<BandwidthRun, "burstsMs" | "modes" | "latency"> {
  burstSeconds: number;
  modes: ByVariant<string>;
  latency: ByVariant<{ unloaded: LatencySamples; loaded: LoadedSamples }>;
}

const none = (): LoadedSamples => ({ p50: [], p90: [], p99: [], tps: [], bulk: [] });

/** Each variant's records keyed by shapeKey ("10-300ms") instead of the limit ("10"). */
function rekey<T, U>(byVariant: ByVariant<T>, ms: number, f: (t: T) => U): ByVariant<U> {
  return Object.fromEntries(
    Object.entries(byVariant).map(([v, byLimit]) => [
      v,
      Object.fromEntries(Object.entries(byLimit ?? {}).map(([mbit, t]) => [`${mbit}-${ms}ms`, f(t)])),
    ]),
  );
}

/** A results file's `bandwidth`, in today's shape whichever shape it was written in. */
export function bandwidthRunOf(raw: BandwidthRun | OlderRun): BandwidthRun {
  if ("burstsMs" in raw) return raw;
  const ms = Math.round(raw.burstSeconds * 1000);
  const { burstSeconds: _, ...rest } = raw;
  return {
    ...rest,
    burstsMs: [ms],
    // Before ingress was shaped (on the pod's host device), this plugin's programs policed it.
    modes: rekey(raw.modes, ms, (egress): PodModes => ({ egress, ingress: "police" })),
    rate: rekey(raw.rate, ms, (r) => r),
    latency: rekey(
      raw.latency,
      ms,
      (l): LatencySet => ({ unloaded: l.unloaded, loaded: { egress: l.loaded, ingress: none() } }),
    ),
  };
}
