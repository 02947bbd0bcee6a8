/**
 * Generic netlink: a family is found by name through the controller family (nlctrl,
 * CTRL_CMD_GETFAMILY), then spoken to with its own id as the message type and a
 * `struct genlmsghdr` (cmd, version) before the attributes. The socket is an RtnlSocket
 * opened with NETLINK_GENERIC: the framing, sequence numbers and errors are the same.
 */
import { attrString, parseAttrs } from "./attrs";
import { NetlinkError, type NetlinkReply, type RtnlSocket } from "./socket";

const GENL_ID_CTRL = 0x10;
const CTRL_CMD_GETFAMILY = 3;
const CTRL_ATTR_FAMILY_ID = 1;
const CTRL_ATTR_FAMILY_NAME = 2;
const GENL_HDRLEN = 4;
const ENOENT = 2;

/** struct genlmsghdr: cmd, version, two reserved bytes. */
export function genlHeader(cmd: number, version: number): Buffer {
  const b = Buffer.alloc(GENL_HDRLEN);
  b.writeUInt8(cmd, 0);
  b.writeUInt8(version, 1);
  return b;
}

/** The attributes of a reply, past its genlmsghdr. */
export const genlAttrs = (reply: NetlinkReply) => parseAttrs(reply.data, GENL_HDRLEN);

/**
 * The id of family `name`, or undefined when the kernel has none of that name (the
 * kernel asks for its module first, as it does for a link kind).
 */
export async function genlFamilyId(sock: RtnlSocket, name: string): Promise<number | undefined> {
  let replies: NetlinkReply[];
  try {
    replies = await sock.request(
      `find generic netlink family ${name}`,
      GENL_ID_CTRL,
      0,
      Buffer.concat([genlHeader(CTRL_CMD_GETFAMILY, 1), attrString(CTRL_ATTR_FAMILY_NAME, name)]),
    );
  } catch (e) {
    if (e instanceof NetlinkError && e.errno === ENOENT) return undefined;
    throw e;
  }
  for (const r of replies) {
    const id = genlAttrs(r).get(CTRL_ATTR_FAMILY_ID);
    if (id && id.length >= 2) return id.readUInt16LE(0);
  }
  return undefined;
}
