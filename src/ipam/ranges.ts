/**
 * Allocation ranges of the embedded IPAM: which addresses of a subnet a range may hand
 * out, and how many. Addresses and subnets themselves (bigints, parsing, canonical text)
 * are cni/address.ts's. Pure: no I/O, no CNI errors.
 */
import { type Address, AF_INET, formatAddress, lastAddress, type Subnet } from "../cni/address";

/** One allocation range, canonical: every field filled in and checked by config.ts. */
export interface IpRange {
  subnet: Subnet;
  start: bigint;
  end: bigint;
  /** Same family as the subnet; may lie outside it (host-local allows that). */
  gateway: bigint;
}

export function rangeContains(range: IpRange, addr: Address): boolean {
  return addr.family === range.subnet.family && addr.value >= range.start && addr.value <= range.end;
}

/**
 * Addresses inside a range that are never handed out: the network address (it names the
 * subnet; for IPv6 it is the subnet-router anycast address), the IPv4 broadcast, and the
 * gateway (it belongs to the router, not to a pod).
 */
export function isExcluded(range: IpRange, value: bigint): boolean {
  const { subnet } = range;
  if (value === subnet.network || value === range.gateway) return true;
  return subnet.family === AF_INET && value === lastAddress(subnet);
}

/** How many addresses of the range can be handed out. */
export function capacity(range: IpRange): bigint {
  let n = range.end - range.start + 1n;
  const excluded = new Set([range.subnet.network, range.gateway]);
  if (range.subnet.family === AF_INET) excluded.add(lastAddress(range.subnet));
  for (const v of excluded) if (v >= range.start && v <= range.end) n--;
  return n;
}

export function formatRange(range: IpRange): string {
  const f = range.subnet.family;
  return `${formatAddress(f, range.start)}-${formatAddress(f, range.end)}`;
}
