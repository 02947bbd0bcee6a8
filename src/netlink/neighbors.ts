/**
 * Neighbour entries (struct ndmsg + NDA_* attributes): permanent entries, and proxy
 * entries (NTF_PROXY: "answer ARP or neighbour solicitations for this address on this
 * device"), which carry a protocol number that says who made them.
 */
import { type Family, familyOf, ipBytes, ipString } from "../cni/address";
import { attr, attrU8, parseAttrs } from "./attrs";
import { macBytes } from "./links";
import { NetlinkError, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, type RtnlSocket } from "./socket";

const RTM_NEWNEIGH = 28;
const RTM_DELNEIGH = 29;
const RTM_GETNEIGH = 30;
const NDA_DST = 1;
const NDA_LLADDR = 2;
const NDA_PROTOCOL = 12;
const NUD_PERMANENT = 0x80;
const NTF_PROXY = 0x08;
const ENOENT = 2;

function ndmsg(family: number, ifindex: number, state: number, flags: number): Buffer {
  const nd = Buffer.alloc(12);
  nd.writeUInt8(family, 0);
  nd.writeInt32LE(ifindex, 4);
  nd.writeUInt16LE(state, 8);
  nd.writeUInt8(flags, 10);
  return nd;
}

/** Pins `address` to `mac` on a device, so no ARP/ND round trip is ever needed for it. */
export async function addPermanentNeighbor(sock: RtnlSocket, ifindex: number, address: string, mac: string) {
  await sock.request(
    `add neighbor ${address}`,
    RTM_NEWNEIGH,
    NLM_F_CREATE | NLM_F_REPLACE,
    Buffer.concat([
      ndmsg(familyOf(address), ifindex, NUD_PERMANENT, 0),
      attr(NDA_DST, ipBytes(address)),
      attr(NDA_LLADDR, macBytes(mac)),
    ]),
  );
}

export interface ProxyNeighbor {
  address: string;
  ifindex: number;
  /** NDA_PROTOCOL; 0 when the entry has none (`ip neigh add proxy` sets none). */
  protocol: number;
}

/** `ip neigh add proxy <address> dev <ifindex> protocol <protocol>`; fails if one exists. */
export async function addProxyNeighbor(sock: RtnlSocket, p: ProxyNeighbor): Promise<void> {
  await sock.request(
    `add proxy neighbour ${p.address}`,
    RTM_NEWNEIGH,
    NLM_F_CREATE | NLM_F_EXCL,
    Buffer.concat([
      ndmsg(familyOf(p.address), p.ifindex, 0, NTF_PROXY),
      attr(NDA_DST, ipBytes(p.address)),
      attrU8(NDA_PROTOCOL, p.protocol),
    ]),
  );
}

/** Removes a proxy entry; false when it was not there. */
export async function deleteProxyNeighbor(sock: RtnlSocket, address: string, ifindex: number): Promise<boolean> {
  try {
    await sock.request(
      `delete proxy neighbour ${address}`,
      RTM_DELNEIGH,
      0,
      Buffer.concat([ndmsg(familyOf(address), ifindex, 0, NTF_PROXY), attr(NDA_DST, ipBytes(address))]),
    );
    return true;
  } catch (e) {
    if (e instanceof NetlinkError && e.errno === ENOENT) return false;
    throw e;
  }
}

/** The proxy entries of one family, on every device. */
export async function listProxyNeighbors(sock: RtnlSocket, family: Family): Promise<ProxyNeighbor[]> {
  // ndm_flags == NTF_PROXY is what makes the kernel dump the proxy table.
  const replies = await sock.dump("list proxy neighbours", RTM_GETNEIGH, ndmsg(family, 0, 0, NTF_PROXY));
  const out: ProxyNeighbor[] = [];
  for (const r of replies) {
    if (r.type !== RTM_NEWNEIGH) continue;
    const attrs = parseAttrs(r.data, 12);
    const dst = attrs.get(NDA_DST);
    if (!dst) continue;
    out.push({ address: ipString(dst), ifindex: r.data.readInt32LE(4), protocol: attrs.get(NDA_PROTOCOL)?.[0] ?? 0 });
  }
  return out;
}
