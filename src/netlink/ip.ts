/**
 * IP address helpers shared by the netlink layer: parse "10.1.2.3" / "fd00::1" (and
 * CIDR forms) into family + bytes and back. Pure.
 */
import { isIPv4, isIPv6 } from "../cni/address";

export const AF_INET = 2;
export const AF_INET6 = 10;

export interface IpPrefix {
  family: typeof AF_INET | typeof AF_INET6;
  address: string;
  prefixLength: number;
}

export function parseCidr(cidr: string): IpPrefix {
  const [address, len] = cidr.split("/");
  const family = familyOf(address ?? "");
  const max = family === AF_INET ? 32 : 128;
  const prefixLength = len === undefined ? max : Number(len);
  if (!Number.isInteger(prefixLength) || prefixLength < 0 || prefixLength > max || !/^\d+$/.test(len ?? `${max}`)) {
    throw new Error(`invalid prefix length in ${cidr}`);
  }
  return { family, address: address as string, prefixLength };
}

export function familyOf(address: string): typeof AF_INET | typeof AF_INET6 {
  if (isIPv4(address)) return AF_INET;
  if (isIPv6(address)) return AF_INET6;
  throw new Error(`invalid IP address ${address}`);
}

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
