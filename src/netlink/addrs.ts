/** Interface addresses: add and list (struct ifaddrmsg + IFA_* attributes). */
import { AF_INET, AF_INET6, familyOf, type IpPrefix, ipBytes, ipString } from "../cni/address";
import { attr, attrU32, parseAttrs } from "./attrs";
import { NLM_F_CREATE, NLM_F_EXCL, type RtnlSocket } from "./socket";

const RTM_NEWADDR = 20;
const RTM_GETADDR = 22;
const IFA_ADDRESS = 1;
const IFA_LOCAL = 2;
const IFA_FLAGS = 8;
const IFA_F_NODAD = 0x02;
const RT_SCOPE_UNIVERSE = 0;

export interface InterfaceAddress extends IpPrefix {
  ifindex: number;
}

function ifaddrmsg(family: number, prefixLength: number, ifindex: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeUInt8(family, 0);
  b.writeUInt8(prefixLength, 1);
  b.writeUInt8(RT_SCOPE_UNIVERSE, 3);
  b.writeUInt32LE(ifindex, 4);
  return b;
}

/** Adds an address; IPv6 skips duplicate address detection so the pod can use it at once. */
export async function addAddress(sock: RtnlSocket, ifindex: number, address: string, prefixLength: number) {
  const family = familyOf(address);
  const bytes = ipBytes(address);
  const attrs = [attr(IFA_LOCAL, bytes), attr(IFA_ADDRESS, bytes)];
  if (family === AF_INET6) attrs.push(attrU32(IFA_FLAGS, IFA_F_NODAD));
  await sock.request(
    `add address ${address}/${prefixLength}`,
    RTM_NEWADDR,
    NLM_F_CREATE | NLM_F_EXCL,
    Buffer.concat([ifaddrmsg(family, prefixLength, ifindex), ...attrs]),
  );
}

export async function listAddresses(sock: RtnlSocket, ifindex?: number): Promise<InterfaceAddress[]> {
  const replies = await sock.dump("list addresses", RTM_GETADDR, ifaddrmsg(0, 0, 0));
  const out: InterfaceAddress[] = [];
  for (const r of replies) {
    if (r.type !== RTM_NEWADDR) continue;
    const family = r.data.readUInt8(0);
    if (family !== AF_INET && family !== AF_INET6) continue;
    const index = r.data.readUInt32LE(4);
    if (ifindex !== undefined && index !== ifindex) continue;
    const attrs = parseAttrs(r.data, 8);
    const bytes = attrs.get(IFA_LOCAL) ?? attrs.get(IFA_ADDRESS);
    if (!bytes) continue;
    out.push({ family, address: ipString(bytes), prefixLength: r.data.readUInt8(1), ifindex: index });
  }
  return out;
}
