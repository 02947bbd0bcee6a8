/**
 * WireGuard's generic netlink family ("wireguard", include/uapi/linux/wireguard.h):
 * WG_CMD_SET_DEVICE (the device's private key and port, peers added, changed or removed)
 * and WG_CMD_GET_DEVICE (a dump: the device and its peers with their endpoints,
 * handshakes and byte counts). Speaking it directly, as the agent speaks rtnetlink,
 * keeps the node free of wireguard-tools: no `wg` binary in the image, no text to parse,
 * and a kernel error comes back as an errno with its extended ack.
 *
 * The encoders and decoder are pure; `WireguardGenl` sends them.
 */
import { AF_INET, AF_INET6, type Family, ipBytes, ipString, parseCidr } from "../cni/address";
import { type Attr, attr, attrNested, attrString, attrU32, parseAttrs, readString } from "./attrs";
import { genlFamilyId, genlHeader } from "./genl";
import { NETLINK_GENERIC, RtnlSocket } from "./socket";

export const WG_GENL_NAME = "wireguard";
const WG_GENL_VERSION = 1;
export const WG_KEY_LEN = 32;

const WG_CMD_GET_DEVICE = 0;
const WG_CMD_SET_DEVICE = 1;

const WGDEVICE_A_IFNAME = 2;
const WGDEVICE_A_PRIVATE_KEY = 3;
const WGDEVICE_A_PUBLIC_KEY = 4;
const WGDEVICE_A_LISTEN_PORT = 6;
const WGDEVICE_A_PEERS = 8;

const WGPEER_F_REMOVE_ME = 1 << 0;
const WGPEER_F_REPLACE_ALLOWEDIPS = 1 << 1;

const WGPEER_A_PUBLIC_KEY = 1;
const WGPEER_A_FLAGS = 3;
const WGPEER_A_ENDPOINT = 4;
const WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL = 5;
const WGPEER_A_LAST_HANDSHAKE_TIME = 6;
const WGPEER_A_RX_BYTES = 7;
const WGPEER_A_TX_BYTES = 8;
const WGPEER_A_ALLOWEDIPS = 9;

const WGALLOWEDIP_A_FAMILY = 1;
const WGALLOWEDIP_A_IPADDR = 2;
const WGALLOWEDIP_A_CIDR_MASK = 3;

export interface WgEndpoint {
  address: string;
  port: number;
}

/** A peer as SET_DEVICE changes it: `remove`, or its endpoint and allowed IPs, replacing its old ones. */
export interface WgPeerChange {
  /** base64, as `wg` and the Node annotation write it. */
  publicKey: string;
  remove?: boolean;
  endpoint?: WgEndpoint;
  allowedIps?: string[];
  keepaliveSeconds?: number;
}

export interface WgDeviceChange {
  ifname: string;
  /** base64 */
  privateKey?: string;
  listenPort?: number;
  peers?: WgPeerChange[];
}

export interface WgPeer {
  publicKey: string;
  endpoint: WgEndpoint | undefined;
  allowedIps: string[];
  /** Seconds since the epoch of the last handshake; 0: none yet. */
  lastHandshake: number;
  rxBytes: bigint;
  txBytes: bigint;
}

export interface WgDevice {
  ifname: string;
  publicKey: string | undefined;
  listenPort: number;
  peers: WgPeer[];
}

const attrU16 = (type: number, v: number): Attr => {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(v);
  return attr(type, b);
};

/** A key as the kernel takes it: exactly 32 bytes, from base64. */
export function keyBytes(base64: string): Buffer {
  const b = Buffer.from(base64, "base64");
  if (b.length !== WG_KEY_LEN || b.toString("base64") !== base64) throw new Error(`not a WireGuard key: ${base64}`);
  return b;
}

/** struct sockaddr_in / sockaddr_in6: family in host order, port in network order. */
export function sockaddr(endpoint: WgEndpoint): Buffer {
  const bytes = ipBytes(endpoint.address);
  const v4 = bytes.length === 4;
  const b = Buffer.alloc(v4 ? 16 : 28);
  b.writeUInt16LE(v4 ? AF_INET : AF_INET6, 0);
  b.writeUInt16BE(endpoint.port, 2);
  bytes.copy(b, v4 ? 4 : 8);
  return b;
}

function readSockaddr(b: Buffer | undefined): WgEndpoint | undefined {
  if (!b || b.length < 16) return undefined;
  const family = b.readUInt16LE(0);
  if (family === AF_INET) return { address: ipString(b.subarray(4, 8)), port: b.readUInt16BE(2) };
  if (family === AF_INET6 && b.length >= 28) return { address: ipString(b.subarray(8, 24)), port: b.readUInt16BE(2) };
  return undefined;
}

function allowedIp(cidr: string): Attr {
  const p = parseCidr(cidr);
  return attrNested(0, [
    attrU16(WGALLOWEDIP_A_FAMILY, p.family),
    attr(WGALLOWEDIP_A_IPADDR, ipBytes(p.address)),
    attr(WGALLOWEDIP_A_CIDR_MASK, Buffer.from([p.prefixLength])),
  ]);
}

function peerAttr(p: WgPeerChange): Attr {
  const attrs = [attr(WGPEER_A_PUBLIC_KEY, keyBytes(p.publicKey))];
  if (p.remove) return attrNested(0, [...attrs, attrU32(WGPEER_A_FLAGS, WGPEER_F_REMOVE_ME)]);
  if (p.allowedIps) attrs.push(attrU32(WGPEER_A_FLAGS, WGPEER_F_REPLACE_ALLOWEDIPS));
  if (p.endpoint) attrs.push(attr(WGPEER_A_ENDPOINT, sockaddr(p.endpoint)));
  if (p.keepaliveSeconds !== undefined) attrs.push(attrU16(WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL, p.keepaliveSeconds));
  if (p.allowedIps) attrs.push(attrNested(WGPEER_A_ALLOWEDIPS, p.allowedIps.map(allowedIp)));
  return attrNested(0, attrs);
}

/** The attributes of one WG_CMD_SET_DEVICE (after the genl header). Pure. */
export function setDeviceAttrs(change: WgDeviceChange): Buffer {
  const attrs = [attrString(WGDEVICE_A_IFNAME, change.ifname)];
  if (change.privateKey !== undefined) attrs.push(attr(WGDEVICE_A_PRIVATE_KEY, keyBytes(change.privateKey)));
  if (change.listenPort !== undefined) attrs.push(attrU16(WGDEVICE_A_LISTEN_PORT, change.listenPort));
  if (change.peers && change.peers.length > 0) attrs.push(attrNested(WGDEVICE_A_PEERS, change.peers.map(peerAttr)));
  return Buffer.concat(attrs);
}

/** Every nested attribute inside `b`, in order (the kernel's lists use index types). */
function nestedList(b: Buffer | undefined): Buffer[] {
  const out: Buffer[] = [];
  let pos = 0;
  while (b && pos + 4 <= b.length) {
    const len = b.readUInt16LE(pos);
    if (len < 4 || pos + len > b.length) break;
    out.push(b.subarray(pos + 4, pos + len));
    pos += (len + 3) & ~3;
  }
  return out;
}

function readAllowedIp(b: Buffer): string | undefined {
  const a = parseAttrs(b);
  const family = a.get(WGALLOWEDIP_A_FAMILY)?.readUInt16LE(0) as Family | undefined;
  const ip = a.get(WGALLOWEDIP_A_IPADDR);
  const mask = a.get(WGALLOWEDIP_A_CIDR_MASK)?.readUInt8(0);
  if (!ip || mask === undefined || (family !== AF_INET && family !== AF_INET6)) return undefined;
  return `${ipString(ip)}/${mask}`;
}

const readU64 = (b: Buffer | undefined): bigint => (b && b.length >= 8 ? b.readBigUInt64LE(0) : 0n);

/**
 * The device as a GET_DEVICE dump describes it, in as many messages as it took: a peer
 * with many allowed IPs continues in the next message under the same public key. Pure.
 */
export function parseDevice(messages: Buffer[]): WgDevice {
  const device: WgDevice = { ifname: "", publicKey: undefined, listenPort: 0, peers: [] };
  const byKey = new Map<string, WgPeer>();
  for (const m of messages) {
    const a = parseAttrs(m);
    device.ifname ||= readString(a.get(WGDEVICE_A_IFNAME)) ?? "";
    const pub = a.get(WGDEVICE_A_PUBLIC_KEY);
    if (pub) device.publicKey = pub.toString("base64");
    const port = a.get(WGDEVICE_A_LISTEN_PORT);
    if (port) device.listenPort = port.readUInt16LE(0);
    for (const p of nestedList(a.get(WGDEVICE_A_PEERS))) {
      const pa = parseAttrs(p);
      const key = pa.get(WGPEER_A_PUBLIC_KEY)?.toString("base64");
      if (!key) continue;
      let peer = byKey.get(key);
      if (!peer) {
        peer = { publicKey: key, endpoint: undefined, allowedIps: [], lastHandshake: 0, rxBytes: 0n, txBytes: 0n };
        byKey.set(key, peer);
        device.peers.push(peer);
      }
      peer.endpoint = readSockaddr(pa.get(WGPEER_A_ENDPOINT)) ?? peer.endpoint;
      const handshake = pa.get(WGPEER_A_LAST_HANDSHAKE_TIME);
      if (handshake && handshake.length >= 16) peer.lastHandshake = Number(handshake.readBigInt64LE(0));
      if (pa.has(WGPEER_A_RX_BYTES)) peer.rxBytes = readU64(pa.get(WGPEER_A_RX_BYTES));
      if (pa.has(WGPEER_A_TX_BYTES)) peer.txBytes = readU64(pa.get(WGPEER_A_TX_BYTES));
      for (const ip of nestedList(pa.get(WGPEER_A_ALLOWEDIPS))) {
        const text = readAllowedIp(ip);
        if (text) peer.allowedIps.push(text);
      }
    }
  }
  return device;
}

/** The family on a generic netlink socket of its own. */
export class WireguardGenl {
  private constructor(
    private readonly sock: RtnlSocket,
    private readonly family: number,
  ) {}

  /** undefined when the kernel has no WireGuard (no module to load). */
  static async open(): Promise<WireguardGenl | undefined> {
    const sock = RtnlSocket.open(undefined, NETLINK_GENERIC);
    try {
      const id = await genlFamilyId(sock, WG_GENL_NAME);
      if (id === undefined) {
        sock.close();
        return undefined;
      }
      return new WireguardGenl(sock, id);
    } catch (e) {
      sock.close();
      throw e;
    }
  }

  async set(change: WgDeviceChange): Promise<void> {
    const what = change.peers?.length ? ` (${change.peers.length} peers)` : "";
    await this.sock.request(
      `configure WireGuard device ${change.ifname}${what}`,
      this.family,
      0,
      Buffer.concat([genlHeader(WG_CMD_SET_DEVICE, WG_GENL_VERSION), setDeviceAttrs(change)]),
    );
  }

  async get(ifname: string): Promise<WgDevice> {
    const replies = await this.sock.dump(
      `read WireGuard device ${ifname}`,
      this.family,
      Buffer.concat([genlHeader(WG_CMD_GET_DEVICE, WG_GENL_VERSION), attrString(WGDEVICE_A_IFNAME, ifname)]),
    );
    return parseDevice(replies.map((r) => r.data.subarray(4)));
  }

  close(): void {
    this.sock.close();
  }
}
