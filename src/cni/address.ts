/**
 * IP addresses and prefixes, read and written in one place: text ↔ family, bytes (what
 * netlink messages and our map keys carry) and bigints (what IPAM counts with); CIDRs,
 * the host prefix (/32, /128) each pod address becomes, and the canonical text host-local
 * names its files after. Pure: no I/O, no CNI errors.
 *
 * It lives in cni/ because every layer reads addresses and every layer may use cni/; the
 * eBPF loader and the netlink layer both take their addresses from here, not from each other.
 *
 * Addresses are recognised here instead of with node:net's isIPv4/isIPv6, whose regular
 * expressions cost ~2 ms to compile on first use: every plugin start would pay that, for
 * a question this simple. Zone suffixes ("%eth0") are refused: no address the plugin
 * handles carries one.
 */

/** Address families as the kernel numbers them: netlink messages and map keys carry them as is. */
export const AF_INET = 2;
export const AF_INET6 = 10;
export type Family = typeof AF_INET | typeof AF_INET6;

export const addressBits = (family: Family): number => (family === AF_INET ? 32 : 128);

/** 4 or 6, as people (and CNI results before 1.0.0) write the family. */
export const ipVersion = (family: Family): 4 | 6 => (family === AF_INET ? 4 : 6);

// ---- recognising text --------------------------------------------------------------

const DECIMAL_OCTET = /^(0|[1-9]\d{0,2})$/;
const HEX_GROUP = /^[0-9a-fA-F]{1,4}$/;

export function isIPv4(text: string): boolean {
  const parts = text.split(".");
  return parts.length === 4 && parts.every((p) => DECIMAL_OCTET.test(p) && Number(p) <= 255);
}

export function isIPv6(text: string): boolean {
  if (text.length < 2 || text.length > 45) return false;
  let rest = text;
  // A dotted IPv4 tail stands for the last two groups.
  const lastColon = rest.lastIndexOf(":");
  const tail = rest.slice(lastColon + 1);
  if (tail.includes(".")) {
    if (!isIPv4(tail)) return false;
    rest = `${rest.slice(0, lastColon + 1)}0:0`;
  }
  const gap = rest.indexOf("::");
  if (gap === -1) {
    const groups = rest.split(":");
    return groups.length === 8 && groups.every((g) => HEX_GROUP.test(g));
  }
  if (rest.indexOf("::", gap + 1) !== -1) return false;
  const left = rest.slice(0, gap);
  const right = rest.slice(gap + 2);
  const groups = [...(left === "" ? [] : left.split(":")), ...(right === "" ? [] : right.split(":"))];
  return groups.length <= 7 && groups.every((g) => HEX_GROUP.test(g));
}

/** The family of a plain address; undefined for anything else (CIDR, zone index, garbage). */
export function addressFamily(text: string): Family | undefined {
  if (isIPv4(text)) return AF_INET;
  if (isIPv6(text)) return AF_INET6;
  return undefined;
}

/** Like addressFamily, for text that must be an address. */
export function familyOf(address: string): Family {
  const family = addressFamily(address);
  if (family === undefined) throw new Error(`invalid IP address ${address}`);
  return family;
}

// ---- bytes (network order) ---------------------------------------------------------

/** 4 bytes for IPv4, 16 for IPv6. */
export function ipBytes(address: string): Buffer {
  if (isIPv4(address)) return Buffer.from(address.split(".").map(Number));
  if (!isIPv6(address)) throw new Error(`invalid IP address ${address}`);
  let text = address;
  const v4Tail = text.match(/(\d+\.\d+\.\d+\.\d+)$/);
  if (v4Tail?.[1]) {
    const [a, b, c, d] = v4Tail[1].split(".").map(Number) as [number, number, number, number];
    text = text.replace(v4Tail[1], `${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`);
  }
  const [head = "", tail] = text.split("::");
  const groups = (s: string) => (s ? s.split(":") : []);
  const h = groups(head);
  const t = tail === undefined ? [] : groups(tail);
  const fill = tail === undefined ? [] : Array(8 - h.length - t.length).fill("0");
  const all = [...h, ...fill, ...t];
  const out = Buffer.alloc(16);
  for (const [i, g] of all.entries()) out.writeUInt16BE(Number.parseInt(g, 16), i * 2);
  return out;
}

/**
 * The canonical text of 4 or 16 bytes, identical to Go's net.IP.String() (dotted quad;
 * RFC 5952 for IPv6), because host-local names each reservation file after it.
 */
export function ipString(bytes: Buffer): string {
  if (bytes.length === 4) return [...bytes].join(".");
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(bytes.readUInt16BE(i).toString(16));
  // Collapse the longest run of zero groups, as RFC 5952 asks.
  let best = { start: -1, len: 0 };
  for (let i = 0; i < 8; ) {
    if (groups[i] !== "0") {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === "0") j++;
    if (j - i > best.len && j - i > 1) best = { start: i, len: j - i };
    i = j;
  }
  if (best.start === -1) return groups.join(":");
  const left = groups.slice(0, best.start).join(":");
  const right = groups.slice(best.start + best.len).join(":");
  return `${left}::${right}`;
}

// ---- prefixes in text form -----------------------------------------------------------

export interface IpPrefix {
  family: Family;
  address: string;
  prefixLength: number;
}

/** "10.1.0.0/24" → its parts; undefined unless it is an address, "/" and a length its family allows. */
export function readCidr(text: string): IpPrefix | undefined {
  const slash = text.indexOf("/");
  const lengthText = text.slice(slash + 1);
  if (slash === -1 || !/^\d{1,3}$/.test(lengthText)) return undefined;
  const address = text.slice(0, slash);
  const family = addressFamily(address);
  const prefixLength = Number(lengthText);
  if (family === undefined || prefixLength > addressBits(family)) return undefined;
  return { family, address, prefixLength };
}

export const isCidr = (text: string): boolean => readCidr(text) !== undefined;

/** A CIDR that must be valid (a bare address stands for its host prefix); throws otherwise. */
export function parseCidr(text: string): IpPrefix {
  const prefix = text.includes("/") ? readCidr(text) : hostPrefixOf(text);
  if (!prefix) throw new Error(`invalid CIDR ${text}`);
  return prefix;
}

function hostPrefixOf(address: string): IpPrefix | undefined {
  const family = addressFamily(address);
  return family === undefined ? undefined : { family, address, prefixLength: addressBits(family) };
}

/** "10.1.0.5/24" → 10.1.0.5/32: pods own single addresses, whatever subnet IPAM gave. */
export function hostPrefix(cidr: string): IpPrefix {
  const { family, address } = parseCidr(cidr);
  return { family, address, prefixLength: addressBits(family) };
}

export const isHostPrefix = (p: IpPrefix): boolean => p.prefixLength === addressBits(p.family);

export const formatCidr = (p: IpPrefix): string => `${p.address}/${p.prefixLength}`;

// ---- addresses and subnets as numbers (IPAM arithmetic) ------------------------------

/** One representation for both families, so "next" and "inside" are plain comparisons. */
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

/** Parses a plain address; undefined for anything else (CIDR, zone index, garbage). */
export function parseAddress(text: string): Address | undefined {
  const family = addressFamily(text);
  if (family === undefined) return undefined;
  return { family, value: BigInt(`0x${ipBytes(text).toString("hex")}`) };
}

/** Strips a "/len" suffix, so both "10.1.0.5" and "10.1.0.5/24" name the address. */
export function parseAddressOrCidr(text: string): Address | undefined {
  const slash = text.indexOf("/");
  return parseAddress(slash === -1 ? text : text.slice(0, slash));
}

/** The canonical text of an address (see ipString). */
export function formatAddress(family: Family, value: bigint): string {
  const bytes = addressBits(family) / 8;
  return ipString(Buffer.from(value.toString(16).padStart(bytes * 2, "0"), "hex"));
}

/** The canonical text of a plain address in any spelling; undefined if it is none. */
export function canonicalAddress(text: string): string | undefined {
  const addr = parseAddress(text);
  return addr ? formatAddress(addr.family, addr.value) : undefined;
}

export type SubnetParse =
  | { ok: true; subnet: Subnet }
  | { ok: false; why: "syntax" }
  | { ok: false; why: "host-bits"; network: string };

export function parseSubnet(text: string): SubnetParse {
  const prefix = readCidr(text);
  const addr = prefix && parseAddress(prefix.address);
  if (!prefix || !addr) return { ok: false, why: "syntax" };
  const network = addr.value & ~hostMask(addr.family, prefix.prefixLength);
  if (network !== addr.value) {
    return { ok: false, why: "host-bits", network: formatAddress(addr.family, network) };
  }
  return { ok: true, subnet: { family: addr.family, network, prefixLength: prefix.prefixLength } };
}

export function hostMask(family: Family, prefixLength: number): bigint {
  return (1n << BigInt(addressBits(family) - prefixLength)) - 1n;
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
