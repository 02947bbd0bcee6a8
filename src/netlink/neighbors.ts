/** Permanent neighbour entries (struct ndmsg + NDA_* attributes). */
import { familyOf, ipBytes } from "../cni/address";
import { attr } from "./attrs";
import { macBytes } from "./links";
import { NLM_F_CREATE, NLM_F_REPLACE, type RtnlSocket } from "./socket";

const RTM_NEWNEIGH = 28;
const NDA_DST = 1;
const NDA_LLADDR = 2;
const NUD_PERMANENT = 0x80;

/** Pins `address` to `mac` on a device, so no ARP/ND round trip is ever needed for it. */
export async function addPermanentNeighbor(sock: RtnlSocket, ifindex: number, address: string, mac: string) {
  const nd = Buffer.alloc(12);
  nd.writeUInt8(familyOf(address), 0);
  nd.writeInt32LE(ifindex, 4);
  nd.writeUInt16LE(NUD_PERMANENT, 8);
  await sock.request(
    `add neighbor ${address}`,
    RTM_NEWNEIGH,
    NLM_F_CREATE | NLM_F_REPLACE,
    Buffer.concat([nd, attr(NDA_DST, ipBytes(address)), attr(NDA_LLADDR, macBytes(mac))]),
  );
}
