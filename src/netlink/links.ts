/**
 * Links (network devices): create veth pairs, find, bring up, delete. Messages are built
 * from `struct ifinfomsg` plus attributes; everything goes through an `RtnlSocket`, so the
 * namespace a call acts on is the one its socket was opened in.
 */
import {
  type Attr,
  attr,
  attrNested,
  attrS32,
  attrString,
  attrU32,
  macText,
  parseAttrs,
  readString,
  readU32,
} from "./attrs";
import { NetlinkError, NLM_F_CREATE, NLM_F_EXCL, type RtnlSocket } from "./socket";

const RTM_NEWLINK = 16;
const RTM_DELLINK = 17;
const RTM_GETLINK = 18;

const IFLA_ADDRESS = 1;
const IFLA_IFNAME = 3;
const IFLA_MTU = 4;
const IFLA_LINK = 5;
const IFLA_LINKINFO = 18;
const IFLA_IFALIAS = 20;
const IFLA_NET_NS_FD = 28;
const IFLA_NUM_TX_QUEUES = 31;
const IFLA_GSO_MAX_SIZE = 41;
const IFLA_GRO_MAX_SIZE = 58;
const IFLA_INFO_KIND = 1;
const IFLA_INFO_DATA = 2;
/** VETH_INFO_PEER and IFLA_NETKIT_PEER_INFO: both kinds carry the peer's ifinfomsg in attribute 1. */
const PEER_INFO = 1;

const IFF_UP = 0x1;
const ENODEV = 19;

export interface Link {
  index: number;
  name: string;
  flags: number;
  mtu: number;
  mac: string;
  kind: string | undefined;
  alias: string | undefined;
  /** Index of the peer/parent in its own namespace (veth, netkit). */
  peerIndex: number | undefined;
  gsoMaxSize: number | undefined;
  groMaxSize: number | undefined;
  /** Transmit queues; more than one means a qdisc per queue under mq. */
  txQueues: number | undefined;
}

export const isUp = (link: Link) => (link.flags & IFF_UP) !== 0;

export function ifinfomsg(index = 0, flags = 0, change = 0): Buffer {
  const b = Buffer.alloc(16);
  b.writeUInt8(0, 0); // AF_UNSPEC
  b.writeInt32LE(index, 4);
  b.writeUInt32LE(flags, 8);
  b.writeUInt32LE(change, 12);
  return b;
}

export function macBytes(mac: string): Buffer {
  return Buffer.from(mac.split(":").map((h) => Number.parseInt(h, 16)));
}

const macString = (b: Buffer | undefined) => (b ? macText(b) : "");

function parseLink(data: Buffer): Link {
  const attrs = parseAttrs(data, 16);
  const info = attrs.get(IFLA_LINKINFO);
  return {
    index: data.readInt32LE(4),
    flags: data.readUInt32LE(8),
    name: readString(attrs.get(IFLA_IFNAME)) ?? "",
    mtu: readU32(attrs.get(IFLA_MTU)) ?? 0,
    mac: macString(attrs.get(IFLA_ADDRESS)),
    kind: info ? readString(parseAttrs(info).get(IFLA_INFO_KIND)) : undefined,
    alias: readString(attrs.get(IFLA_IFALIAS)),
    peerIndex: readU32(attrs.get(IFLA_LINK)),
    gsoMaxSize: readU32(attrs.get(IFLA_GSO_MAX_SIZE)),
    groMaxSize: readU32(attrs.get(IFLA_GRO_MAX_SIZE)),
    txQueues: readU32(attrs.get(IFLA_NUM_TX_QUEUES)),
  };
}

/** Settings for one end of a device pair. */
export interface PairEnd {
  name: string;
  mtu?: number;
  mac?: string;
  /** Largest GSO/GRO packets the end builds or accepts (BIG TCP when above 64 KiB). */
  gsoMaxSize?: number;
  groMaxSize?: number;
}

function endAttrs(end: PairEnd): Attr[] {
  const attrs = [attrString(IFLA_IFNAME, end.name)];
  if (end.mtu) attrs.push(attrU32(IFLA_MTU, end.mtu));
  if (end.mac) attrs.push(attr(IFLA_ADDRESS, macBytes(end.mac)));
  if (end.gsoMaxSize) attrs.push(attrU32(IFLA_GSO_MAX_SIZE, end.gsoMaxSize));
  if (end.groMaxSize) attrs.push(attrU32(IFLA_GRO_MAX_SIZE, end.groMaxSize));
  return attrs;
}

/**
 * Builds one RTM_NEWLINK that creates a device pair whose peer lands directly in
 * `peerNetnsFd`, so the pod end never exists in the host namespace.
 */
export function newPairMessage(
  kind: string,
  host: PairEnd,
  peer: PairEnd,
  peerNetnsFd: number | undefined,
  data: Attr[],
): Buffer {
  const netns = peerNetnsFd === undefined ? [] : [attrS32(IFLA_NET_NS_FD, peerNetnsFd)];
  const peerInfo = attr(PEER_INFO, Buffer.concat([ifinfomsg(), ...endAttrs(peer), ...netns]));
  const linkinfo = attrNested(IFLA_LINKINFO, [
    attrString(IFLA_INFO_KIND, kind),
    attrNested(IFLA_INFO_DATA, [peerInfo, ...data]),
  ]);
  return Buffer.concat([ifinfomsg(), ...endAttrs(host), linkinfo]);
}

export async function createPair(
  sock: RtnlSocket,
  kind: string,
  host: PairEnd,
  peer: PairEnd,
  peerNetnsFd: number,
  data: Attr[] = [],
): Promise<void> {
  await sock.request(
    `create ${kind} pair ${host.name}/${peer.name}`,
    RTM_NEWLINK,
    NLM_F_CREATE | NLM_F_EXCL,
    newPairMessage(kind, host, peer, peerNetnsFd, data),
  );
}

export async function getLinkByName(sock: RtnlSocket, name: string): Promise<Link | undefined> {
  try {
    const [reply] = await sock.request(
      `get link ${name}`,
      RTM_GETLINK,
      0,
      Buffer.concat([ifinfomsg(), attrString(IFLA_IFNAME, name)]),
    );
    return reply ? parseLink(reply.data) : undefined;
  } catch (e) {
    if (e instanceof NetlinkError && e.errno === ENODEV) return undefined;
    throw e;
  }
}

export async function getLinkByIndex(sock: RtnlSocket, index: number): Promise<Link | undefined> {
  try {
    const [reply] = await sock.request(`get link #${index}`, RTM_GETLINK, 0, ifinfomsg(index));
    return reply ? parseLink(reply.data) : undefined;
  } catch (e) {
    if (e instanceof NetlinkError && e.errno === ENODEV) return undefined;
    throw e;
  }
}

export async function listLinks(sock: RtnlSocket): Promise<Link[]> {
  const replies = await sock.dump("list links", RTM_GETLINK, ifinfomsg());
  return replies.filter((r) => r.type === RTM_NEWLINK).map((r) => parseLink(r.data));
}

/** Brings a link up, and sets its alias in the same message when one is given. */
export async function setLinkUp(sock: RtnlSocket, link: Link, alias?: string): Promise<void> {
  const attrs = alias === undefined ? [] : [attrString(IFLA_IFALIAS, alias)];
  await sock.request(
    `set ${link.name} up`,
    RTM_NEWLINK,
    0,
    Buffer.concat([ifinfomsg(link.index, IFF_UP, IFF_UP), ...attrs]),
  );
}

/**
 * Takes a link down and sets its alias in one message. Down removes the routes through it
 * (both families) and stops it passing frames either way; unlike deletion it waits out
 * no RCU grace period.
 */
export async function setLinkDown(sock: RtnlSocket, link: Link, alias: string): Promise<void> {
  await sock.request(
    `set ${link.name} down`,
    RTM_NEWLINK,
    0,
    Buffer.concat([ifinfomsg(link.index, 0, IFF_UP), attrString(IFLA_IFALIAS, alias)]),
  );
}

/**
 * Deletes the link `link` names by its index, which the kernel never gives to another
 * device meanwhile (a name can be taken again at once); false if it is gone.
 */
export async function deleteLink(sock: RtnlSocket, link: Link): Promise<boolean> {
  try {
    await sock.request(`delete link ${link.name}`, RTM_DELLINK, 0, ifinfomsg(link.index));
    return true;
  } catch (e) {
    if (e instanceof NetlinkError && e.errno === ENODEV) return false;
    throw e;
  }
}

/** Deletes a link by name; returns false if it did not exist. */
export async function deleteLinkByName(sock: RtnlSocket, name: string): Promise<boolean> {
  try {
    await sock.request(
      `delete link ${name}`,
      RTM_DELLINK,
      0,
      Buffer.concat([ifinfomsg(), attrString(IFLA_IFNAME, name)]),
    );
    return true;
  } catch (e) {
    if (e instanceof NetlinkError && e.errno === ENODEV) return false;
    throw e;
  }
}

/**
 * Creates a device of `kind` that needs no kind-specific data (`wireguard`); the kernel
 * loads the kind's module first, and answers EOPNOTSUPP when it has none.
 */
export async function createLink(sock: RtnlSocket, kind: string, name: string, mtu?: number): Promise<void> {
  const attrs = [attrString(IFLA_IFNAME, name)];
  if (mtu) attrs.push(attrU32(IFLA_MTU, mtu));
  await sock.request(
    `create ${kind} device ${name}`,
    RTM_NEWLINK,
    NLM_F_CREATE | NLM_F_EXCL,
    Buffer.concat([ifinfomsg(), ...attrs, attrNested(IFLA_LINKINFO, [attrString(IFLA_INFO_KIND, kind)])]),
  );
}

/** Sets a link's MTU. */
export async function setLinkMtu(sock: RtnlSocket, link: Link, mtu: number): Promise<void> {
  await sock.request(
    `set ${link.name} mtu ${mtu}`,
    RTM_NEWLINK,
    0,
    Buffer.concat([ifinfomsg(link.index), attrU32(IFLA_MTU, mtu)]),
  );
}

/** The name (and MAC, where given) a link takes when it is renamed or moved. */
export interface LinkIdentity {
  name: string;
  mac?: string | undefined;
}

function identityAttrs(as: LinkIdentity): Attr[] {
  const attrs = [attrString(IFLA_IFNAME, as.name)];
  if (as.mac) attrs.push(attr(IFLA_ADDRESS, macBytes(as.mac)));
  return attrs;
}

/**
 * Moves a link into the namespace `netnsFd` under a new name (and MAC) in one request:
 * the kernel takes the name as the device's name there, so it never exists in the new
 * namespace under another, nor clashes with a namespace's own device of its old name.
 * Nothing attached to its peer moves or detaches.
 */
export async function moveLink(sock: RtnlSocket, link: Link, netnsFd: number, as: LinkIdentity): Promise<void> {
  await sock.request(
    `move ${link.name} into a namespace as ${as.name}`,
    RTM_NEWLINK,
    0,
    Buffer.concat([ifinfomsg(link.index), attrS32(IFLA_NET_NS_FD, netnsFd), ...identityAttrs(as)]),
  );
}

/** Renames a link (and sets its MAC) in one request; the programs attached to it stay. */
export async function renameLink(sock: RtnlSocket, link: Link, as: LinkIdentity): Promise<void> {
  await sock.request(
    `rename ${link.name} to ${as.name}`,
    RTM_NEWLINK,
    0,
    Buffer.concat([ifinfomsg(link.index), ...identityAttrs(as)]),
  );
}
