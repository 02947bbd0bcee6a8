/**
 * The allocation policy, host-local's: round-robin through a range set's ranges, starting
 * just after the address last reserved from that set and wrapping around, skipping the
 * network address, the IPv4 broadcast and the gateway. Pure: it proposes addresses; the
 * store decides whether one is still free. Never reads or writes files.
 */

import { formatAddress, parseAddress } from "../cni/address";
import type { RangeSet } from "./config";
import { capacity, formatRange, type IpRange, isExcluded, rangeContains } from "./ranges";

export interface Candidate {
  range: IpRange;
  ip: string;
}

/** The range of the set holding `ip`, if any. */
export function rangeFor(set: RangeSet, ip: string): IpRange | undefined {
  const addr = parseAddress(ip);
  return addr ? set.ranges.find((r) => rangeContains(r, addr)) : undefined;
}

/**
 * Every allocatable address of the set once, in round-robin order: from the address after
 * `lastReserved` (when it still lies in the set) or else from the first range's start,
 * through the ranges in order, wrapping to the first.
 */
export function* candidates(set: RangeSet, lastReserved: string | undefined): Generator<Candidate> {
  const { ranges, family } = set;
  let index = 0;
  let cur: bigint | undefined;
  const last = lastReserved === undefined ? undefined : parseAddress(lastReserved);
  if (last) {
    const at = ranges.findIndex((r) => rangeContains(r, last));
    if (at !== -1) {
      index = at;
      cur = last.value;
    }
  }
  const first = ranges[index];
  if (!first) return;
  // Walk positions, not addresses: the count of steps is the set's size, whatever the start.
  let remaining = ranges.reduce((n, r) => n + (r.end - r.start + 1n), 0n);
  let range = first;
  let value = cur === undefined ? range.start : cur + 1n;
  while (remaining > 0n) {
    if (value > range.end) {
      index = (index + 1) % ranges.length;
      range = ranges[index] as IpRange;
      value = range.start;
    }
    remaining--;
    if (!isExcluded(range, value)) yield { range, ip: formatAddress(family, value) };
    value++;
  }
}

/** How many addresses the set can hand out in total. */
export function setCapacity(set: RangeSet): bigint {
  return set.ranges.reduce((n, r) => n + capacity(r), 0n);
}

/** How many addresses after the hint are tried one by one before the taken ones are looked up. */
export const HINT_PROBES = 32;

/**
 * The addresses worth trying, in round-robin order, for a store that can try one cheaply
 * (an exclusive create that fails if the address is taken). After the hint they are
 * usually free, so the first HINT_PROBES are proposed as they come; past a run of taken
 * ones (the range has wrapped around onto long-lived pods) `reservedNow()` is asked once,
 * so the rest skips what it names, and nothing is proposed when it fills the set.
 */
export function* proposals(
  set: RangeSet,
  lastReserved: string | undefined,
  reservedNow: () => Set<string>,
): Generator<string> {
  let reserved: Set<string> | undefined;
  let proposed = 0;
  for (const c of candidates(set, lastReserved)) {
    if (reserved === undefined && proposed++ === HINT_PROBES) {
      reserved = reservedNow();
      const inSet = [...reserved].filter((ip) => rangeFor(set, ip)).length;
      if (BigInt(inSet) >= setCapacity(set)) return;
    }
    if (!reserved?.has(c.ip)) yield c.ip;
  }
}

/**
 * The first free candidate, or undefined when the set is full. `reservedInSet` counts the
 * set's addresses already taken: when it reaches the capacity the answer is known without
 * walking (a full /8 would otherwise mean millions of steps); otherwise the walk meets at
 * most that many taken addresses before a free one.
 */
export function pickFree(
  set: RangeSet,
  lastReserved: string | undefined,
  isTaken: (ip: string) => boolean,
  reservedInSet: number,
): Candidate | undefined {
  if (BigInt(reservedInSet) >= setCapacity(set)) return undefined;
  for (const c of candidates(set, lastReserved)) {
    if (!isTaken(c.ip)) return c;
  }
  return undefined;
}

export function describeSet(set: RangeSet): string {
  return set.ranges.map(formatRange).join(",");
}
