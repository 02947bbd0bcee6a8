/**
 * Hand-built frames for BPF_PROG_TEST_RUN: Ethernet + IPv4/IPv6 + TCP/UDP/SCTP/ICMP(v6) echo,
 * plus readers for the fields the programs rewrite. L4 checksums are left zero: the
 * programs never read them. The IPv4 header checksum is real, so a test can check the
 * program's incremental update. Fragments (a later one carries no transport header:
 * `fragmentData`) and ICMP errors quoting another packet (icmpError) are built too.
 */
import { AF_INET6, familyOf, ipBytes } from "../../../src/cni/address";

export const PROTO = { icmp: 1, tcp: 6, udp: 17, icmpv6: 58, sctp: 132 } as const;

export interface PacketSpec {
  src: string;
  dst: string;
  proto: "tcp" | "udp" | "icmp" | "sctp";
  sport?: number;
  dport?: number;
  /** ICMP echo identifier. */
  echoId?: number;
  echoReply?: boolean;
  ttl?: number;
  srcMac?: string;
  dstMac?: string;
  /** IPv4: set the more-fragments bit. */
  fragment?: boolean;
  /** IPv4: fragment offset in 8-byte units (a non-first fragment). */
  fragmentOffset?: number;
  /** IPv4: the identification (0x1234 unless given); IPv6's is the fragment header's. */
  ipId?: number;
  /** Everything after the IP header (and its IPv6 extension headers), as given: a later
   * fragment's bytes, which start with no transport header. Replaces the transport
   * header and payload; `proto` still names the protocol in the IP header. */
  fragmentData?: Buffer;
  /** IPv4 options (padded to a multiple of 4 bytes). */
  ipv4Options?: Buffer;
  /** IPv6 extension headers between the fixed header and the transport header, in order. */
  ipv6Ext?: Ipv6Ext[];
  /** ICMP type other than echo (e.g. 3 destination unreachable / IPv6 1). */
  icmpType?: number;
  /** ICMP code (0 unless given). */
  icmpCode?: number;
  /** ICMP: bytes 4-7 of a type other than echo (an MTU, a pointer); 0 unless given. */
  icmpRest?: number;
  /** TCP flags; ACK (0x10) unless given: most packets of a connection. */
  tcpFlags?: number;
  /** What follows the transport header (16 zero bytes unless given). */
  payload?: Buffer;
}

export const TCP = { SYN: 0x02, ACK: 0x10, FIN: 0x01, RST: 0x04 } as const;

export type Ipv6Ext =
  | { type: "hop" | "dest"; length?: number }
  | { type: "routing"; segmentsLeft: number }
  | { type: "fragment"; offset?: number; more?: boolean; id?: number }
  | { type: "ah" };

const NEXT_HEADER = { hop: 0, routing: 43, fragment: 44, ah: 51, dest: 60 } as const;

/** The extension headers' bytes, each naming the next; `last` is the transport protocol. */
function ipv6Extensions(exts: Ipv6Ext[], last: number): Buffer {
  const parts = exts.map((ext, i) => {
    const next = i + 1 < exts.length ? NEXT_HEADER[(exts[i + 1] as Ipv6Ext).type] : last;
    let h: Buffer;
    if (ext.type === "hop" || ext.type === "dest") {
      // Length in 8-byte units beyond the first 8, filled with PadN.
      const units = ext.length ?? 0;
      h = Buffer.alloc(8 + units * 8);
      h.writeUInt8(units, 1);
      h.writeUInt8(1, 2); // PadN
      h.writeUInt8(h.length - 4, 3);
    } else if (ext.type === "routing") {
      h = Buffer.alloc(24); // type 4 (segment routing) with one 16-byte segment
      h.writeUInt8(2, 1);
      h.writeUInt8(4, 2);
      h.writeUInt8(ext.segmentsLeft, 3);
    } else if (ext.type === "fragment") {
      h = Buffer.alloc(8);
      h.writeUInt16BE(((ext.offset ?? 0) << 3) | (ext.more ? 1 : 0), 2);
      h.writeUInt32BE(ext.id ?? 0x1234, 4);
    } else {
      h = Buffer.alloc(16); // AH: payload length 2 (in 4-byte units, minus 2) = 16 bytes
      h.writeUInt8(2, 1);
    }
    h.writeUInt8(next, 0);
    return h;
  });
  return Buffer.concat(parts);
}

const mac = (text: string) => Buffer.from(text.split(":").map((h) => Number.parseInt(h, 16)));

function ipv4Checksum(header: Buffer): number {
  let sum = 0;
  for (let i = 0; i < header.length; i += 2) sum += header.readUInt16BE(i);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >> 16);
  return ~sum & 0xffff;
}

function l4(spec: PacketSpec, v6: boolean): Buffer {
  if (spec.fragmentData) return spec.fragmentData;
  const payload = spec.payload ?? Buffer.alloc(16);
  if (spec.proto === "icmp") {
    const h = Buffer.alloc(8);
    const [echo, reply] = v6 ? [128, 129] : [8, 0];
    h.writeUInt8(spec.icmpType ?? (spec.echoReply ? reply : echo), 0);
    h.writeUInt8(spec.icmpCode ?? 0, 1);
    if (spec.icmpType === undefined) {
      h.writeUInt16BE(spec.echoId ?? 0x4242, 4);
      h.writeUInt16BE(1, 6);
    } else h.writeUInt32BE(spec.icmpRest ?? 0, 4);
    return Buffer.concat([h, payload]);
  }
  // SCTP's common header: ports, verification tag, checksum (12 bytes; 8 read here).
  const h = Buffer.alloc(spec.proto === "tcp" ? 20 : spec.proto === "sctp" ? 12 : 8);
  h.writeUInt16BE(spec.sport ?? 40000, 0);
  h.writeUInt16BE(spec.dport ?? 80, 2);
  if (spec.proto === "tcp") {
    h.writeUInt8(5 << 4, 12);
    h.writeUInt8(spec.tcpFlags ?? TCP.ACK, 13);
  } else if (spec.proto === "udp") h.writeUInt16BE(h.length + payload.length, 4);
  return Buffer.concat([h, payload]);
}

export function packet(spec: PacketSpec): Buffer {
  const v6 = familyOf(spec.dst) === AF_INET6;
  const eth = Buffer.alloc(14);
  mac(spec.dstMac ?? "02:00:00:00:00:01").copy(eth, 0);
  mac(spec.srcMac ?? "02:00:00:00:00:02").copy(eth, 6);
  eth.writeUInt16BE(v6 ? 0x86dd : 0x0800, 12);
  const payload = l4(spec, v6);
  if (v6) {
    const transport = spec.proto === "icmp" ? PROTO.icmpv6 : PROTO[spec.proto];
    const exts = spec.ipv6Ext ?? [];
    const ext = ipv6Extensions(exts, transport);
    const ip = Buffer.alloc(40);
    ip.writeUInt32BE(6 << 28, 0);
    ip.writeUInt16BE(ext.length + payload.length, 4);
    ip.writeUInt8(exts[0] ? NEXT_HEADER[exts[0].type] : transport, 6);
    ip.writeUInt8(spec.ttl ?? 64, 7);
    ipBytes(spec.src).copy(ip, 8);
    ipBytes(spec.dst).copy(ip, 24);
    return Buffer.concat([eth, ip, ext, payload]);
  }
  const options = spec.ipv4Options ?? Buffer.alloc(0);
  if (options.length % 4 !== 0) throw new Error("IPv4 options must be padded to 4 bytes");
  const ip = Buffer.alloc(20 + options.length);
  ip.writeUInt8(0x40 | (ip.length / 4), 0);
  ip.writeUInt16BE(ip.length + payload.length, 2);
  ip.writeUInt16BE(spec.ipId ?? 0x1234, 4);
  const offset = spec.fragmentOffset ?? 0;
  ip.writeUInt16BE(spec.fragment || offset > 0 ? (spec.fragment ? 0x2000 : 0) | offset : 0x4000, 6); // MF, or DF
  ip.writeUInt8(spec.ttl ?? 64, 8);
  ip.writeUInt8(PROTO[spec.proto], 9);
  ipBytes(spec.src).copy(ip, 12);
  ipBytes(spec.dst).copy(ip, 16);
  options.copy(ip, 20);
  ip.writeUInt16BE(ipv4Checksum(ip), 10);
  return Buffer.concat([eth, ip, payload]);
}

interface IcmpErrorSpec {
  /** Who sends the error (a router, the pod) and to whom (the quoted packet's sender). */
  src: string;
  dst: string;
  /** IPv4: 3 destination unreachable, 11 time exceeded, 12 parameter problem; IPv6: 1-4. */
  type: number;
  code?: number;
  /** Bytes 4-7: IPv6 Packet Too Big's MTU; IPv4 fragmentation needed's next-hop MTU. */
  mtu?: number;
  /** The packet the error is about: its IP header and the first 8 bytes after it are quoted. */
  quoting: PacketSpec;
  ttl?: number;
  srcMac?: string;
  dstMac?: string;
}

/** An ICMP or ICMPv6 error quoting another packet, as a router or a host sends one. */
export function icmpError(spec: IcmpErrorSpec): Buffer {
  const quoted = packet(spec.quoting).subarray(14);
  const v6 = familyOf(spec.dst) === AF_INET6;
  const header = v6 ? 40 : ((quoted[0] ?? 0x45) & 0x0f) * 4;
  return packet({
    src: spec.src,
    dst: spec.dst,
    proto: "icmp",
    icmpType: spec.type,
    icmpCode: spec.code ?? 0,
    icmpRest: spec.mtu ?? 0,
    payload: Buffer.from(quoted.subarray(0, header + 8)),
    ttl: spec.ttl,
    srcMac: spec.srcMac,
    dstMac: spec.dstMac,
  });
}

/** 802.1Q and 802.1ad: the tag protocol identifiers a tag starts with. */
export const TPID = { q: 0x8100, ad: 0x88a8 } as const;

interface VlanTag {
  tpid: number;
  vid: number;
}

/** The frame with `tags` inserted after its MAC addresses, outermost first. */
export function tagged(frame: Buffer, tags: VlanTag[]): Buffer {
  const inserted = tags.map((t) => {
    const tag = Buffer.alloc(4);
    tag.writeUInt16BE(t.tpid, 0);
    tag.writeUInt16BE(t.vid & 0x0fff, 2);
    return tag;
  });
  return Buffer.concat([frame.subarray(0, 12), ...inserted, frame.subarray(12)]);
}

/** The frame with another ethertype in its Ethernet header (the rest unchanged). */
export function withEthertype(frame: Buffer, ethertype: number): Buffer {
  const copy = Buffer.from(frame);
  copy.writeUInt16BE(ethertype, 12);
  return copy;
}

interface ArpSpec {
  /** Sender protocol address (spa); 0.0.0.0 for a probe. */
  senderIp: string;
  targetIp: string;
  senderMac?: string;
  op?: "request" | "reply";
  /** Replaces the hardware type (1, Ethernet) to build a malformed one. */
  htype?: number;
}

/** ARP for IPv4 over Ethernet: the Ethernet header and the 28-byte packet. */
export function arp(spec: ArpSpec): Buffer {
  const senderMac = mac(spec.senderMac ?? "02:00:00:00:00:02");
  const frame = Buffer.alloc(14 + 28);
  mac("ff:ff:ff:ff:ff:ff").copy(frame, 0);
  senderMac.copy(frame, 6);
  frame.writeUInt16BE(0x0806, 12);
  frame.writeUInt16BE(spec.htype ?? 1, 14);
  frame.writeUInt16BE(0x0800, 16);
  frame.writeUInt8(6, 18);
  frame.writeUInt8(4, 19);
  frame.writeUInt16BE(spec.op === "reply" ? 2 : 1, 20);
  senderMac.copy(frame, 22);
  ipBytes(spec.senderIp).copy(frame, 28);
  ipBytes(spec.targetIp).copy(frame, 38);
  return frame;
}

export const readMac = (frame: Buffer, offset: 0 | 6) =>
  [...frame.subarray(offset, offset + 6)].map((b) => b.toString(16).padStart(2, "0")).join(":");

/** TTL (IPv4) or hop limit (IPv6) of a frame. */
export const readTtl = (frame: Buffer) => (frame.readUInt16BE(12) === 0x86dd ? frame[14 + 7] : frame[14 + 8]);

/** True when the IPv4 header checksum verifies (sum over the header is 0xffff). */
export const ipv4HeaderValid = (frame: Buffer) =>
  ipv4Checksum(frame.subarray(14, 14 + ((frame[14] ?? 0) & 0x0f) * 4)) === 0;
