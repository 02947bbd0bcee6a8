/**
 * Address arithmetic for the embedded IPAM: addresses as bigints (one representation for
 * IPv4 and IPv6, so "next address" and "inside this range" are plain comparisons), subnets,
 * allocation ranges, and the text forms host-local uses for file names.
 * Pure: no I/O, no CNI errors. Callers turn `undefined` results into messages.
 */
import { isIPv4, isIPv6 } from "../cni/address";
import { ipBytes, ipString } from "../netlink/ip";

export type Family = 4 | 6;

export interface Address {
  family: Family;
  value: bigint;
}

export interface Subnet {
  family: Family;
  /** The network address (host bits zero). */
  network: bigint;
  prefixLength: number;
}

/** One allocation range, canonical: every field filled in and checked by config.ts. */
export interface IpRange {
  subnet: Subnet;
  start: bigint;
  end: bigint;
  /** Same family as the subnet; may lie outside it (host-local allows that). */
  gateway: bigint;
}

export const bitsOf = (family: Family): number => (family === 4 ? 32 : 128);

/** Parses a plain address; undefined for anything else (CIDR, zone index, garbage). */
export function parseAddress(text: string): Address | undefined {
  // A zone index ("fe80::1%eth0") names an interface, not an address we can allocate.
  if (text.includes("%")) return undefined;
  let family: Family;
  if (isIPv4(text)) family = 4;
  else if (isIPv6(text)) family = 6;
  else return undefined;
  return { family, value: BigInt(`0x${ipBytes(text).toString("hex")}`) };
}

/**
 * The text form of an address, identical to Go's net.IP.String() (dotted quad; RFC 5952
 * for IPv6), because host-local names each reservation file after it.
 */
export function formatAddress(family: Family, value: bigint): string {
  const bytes = bitsOf(family) / 8;
  return ipString(Buffer.from(value.toString(16).padStart(bytes * 2, "0"), "hex"));
}

/** Strips a "/len" suffix, so both "10.1.0.5" and "10.1.0.5/24" name the address. */
export function parseAddressOrCidr(text: string): Address | undefined {
  const slash = text.indexOf("/");
  return parseAddress(slash === -1 ? text : text.slice(0, slash));
}

export type SubnetParse =
  | { ok: true; subnet: Subnet }
  | { ok: false; why: "syntax" }
  | { ok: false; why: "host-bits"; network: string };

export function parseSubnet(text: string): SubnetParse {
  const parts = text.split("/");
  if (parts.length !== 2 || !/^\d{1,3}$/.test(parts[1] ?? "")) return { ok: false, why: "syntax" };
  const addr = parseAddress(parts[0] ?? "");
  const prefixLength = Number(parts[1]);
  if (!addr || prefixLength > bitsOf(addr.family)) return { ok: false, why: "syntax" };
  const network = addr.value & ~hostMask(addr.family, prefixLength);
  if (network !== addr.value) {
    return { ok: false, why: "host-bits", network: formatAddress(addr.family, network) };
  }
  return { ok: true, subnet: { family: addr.family, network, prefixLength } };
}

export function hostMask(family: Family, prefixLength: number): bigint {
  return (1n << BigInt(bitsOf(family) - prefixLength)) - 1n;
}

/** The highest address of the subnet: the IPv4 broadcast, or the last IPv6 address. */
export function lastAddress(subnet: Subnet): bigint {
  return subnet.network | hostMask(subnet.family, subnet.prefixLength);
}

export function subnetContains(subnet: Subnet, addr: Address): boolean {
  return addr.family === subnet.family && addr.value >= subnet.network && addr.value <= lastAddress(subnet);
}

export function formatSubnet(subnet: Subnet): string {
  return `${formatAddress(subnet.family, subnet.network)}/${subnet.prefixLength}`;
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
  return subnet.family === 4 && value === lastAddress(subnet);
}

/** How many addresses of the range can be handed out. */
export function capacity(range: IpRange): bigint {
  let n = range.end - range.start + 1n;
  const excluded = new Set([range.subnet.network, range.gateway]);
  if (range.subnet.family === 4) excluded.add(lastAddress(range.subnet));
  for (const v of excluded) if (v >= range.start && v <= range.end) n--;
  return n;
}

export function formatRange(range: IpRange): string {
  const f = range.subnet.family;
  return `${formatAddress(f, range.start)}-${formatAddress(f, range.end)}`;
}
