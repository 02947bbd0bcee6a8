/**
 * A run's figures as the report's sections read them: one path's crossing counts, one
 * path's netperf samples, one configuration's storms. Absent parts read as absent (or as
 * no samples), so that a run of some sections renders the others as not measured.
 */
import type { NetperfTest } from "../../test/support/netperf";
import type { CpId } from "./control-plane";
import type { CrossingResult } from "./dataplane";
import type { KernelFloor } from "./kernel-floor";
import type { PathId, Placement } from "./paths";
import type { BenchResult } from "./result";

export function crossing(r: BenchResult | undefined, id: PathId, pl: Placement): CrossingResult | undefined {
  return r?.crossings?.find((c) => c.path === id && c.placement === pl);
}

/** Per round, in the order the rounds ran. */
export function samplesOf(r: BenchResult, id: PathId, pl: Placement, t: NetperfTest): number[] {
  return r.netperf?.samples[id]?.[pl]?.[t] ?? [];
}

/** A configuration's storms: their mean wall time, failures in all, and each wall time. */
export function stormMean(r: BenchResult, id: CpId): { wall: number; failures: number; walls: number[] } {
  const s = r.controlPlane?.storms[id] ?? [];
  const walls = s.map((x) => x.wallMs);
  return {
    wall: walls.length ? walls.reduce((a, b) => a + b, 0) / walls.length : Number.NaN,
    failures: s.reduce((a, x) => a + x.failures, 0),
    walls,
  };
}

/**
 * The least an ADD+DEL of the Bun executable can take, by its parts (medians): the pod's
 * tcx link attached and released, two bare starts, the veth pair made and deleted.
 */
export function cycleFloor(f: KernelFloor): { link: number; starts: number; pair: number; total: number } {
  const link = f.tcxAttachMs.median + f.linkReleaseMs.median;
  const starts = 2 * f.bunBareMs.median;
  const pair = f.vethCreateMs.median + f.vethDeleteMs.median;
  return { link, starts, pair, total: link + starts + pair };
}
