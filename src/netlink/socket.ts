/**
 * A route-netlink socket bound to one network namespace: requests with sequence numbers,
 * replies gathered until the kernel's ACK (or a dump's DONE), kernel errors as
 * `NetlinkError` with errno and the extended-ack text ("Invalid MTU"), and opening the
 * socket inside another netns. The descriptor and its blocking calls are
 * src/sys/netlink-fd.ts's; every request completes before it returns.
 *
 * The socket is created inside the target netns and used from the host namespace after.
 */
import * as os from "node:os";
import { setsockoptInt } from "../sys/libc";
import { NetlinkFd } from "../sys/netlink-fd";
import { inNetnsFd, netnsCookieOf } from "../sys/netns";
import { parseAttrs, readString } from "./attrs";

const NETLINK_ROUTE = 0;
/** Generic netlink: families registered by name (WireGuard's, netlink/genl.ts). */
export const NETLINK_GENERIC = 16;
const SOL_NETLINK = 270;
const NETLINK_CAP_ACK = 10;
const NETLINK_EXT_ACK = 11;

export const NLM_F_REQUEST = 0x1;
export const NLM_F_ACK = 0x4;
export const NLM_F_DUMP = 0x300;
export const NLM_F_REPLACE = 0x100;
export const NLM_F_EXCL = 0x200;
export const NLM_F_CREATE = 0x400;

const NLMSG_ERROR = 2;
const NLMSG_DONE = 3;
const NLM_F_CAPPED = 0x100;
const NLM_F_ACK_TLVS = 0x200;
const NLMSGERR_ATTR_MSG = 1;
const NLMSG_HDRLEN = 16;

const REQUEST_TIMEOUT_SECONDS = 10;

export class NetlinkError extends Error {
  constructor(
    readonly operation: string,
    readonly errno: number,
    readonly extack: string | undefined,
  ) {
    const code = errnoName(errno);
    super(`${operation}: ${extack ? `${extack} (${code})` : code}`);
    this.name = "NetlinkError";
  }
  get code(): string {
    return errnoName(this.errno);
  }
}

function errnoName(errno: number): string {
  for (const [name, value] of Object.entries(os.constants.errno)) if (value === errno) return name;
  return `errno ${errno}`;
}

export interface NetlinkReply {
  type: number;
  data: Buffer;
}

/** One message as the kernel framed it: struct nlmsghdr, then `data`. */
interface NetlinkMessage extends NetlinkReply {
  flags: number;
  seq: number;
}

export class RtnlSocket {
  private seq = Math.floor(Math.random() * 0x7fffffff);

  private constructor(private readonly fd: NetlinkFd) {}

  /**
   * Opens a socket in the caller's current namespace, or inside the netns open on `netnsFd`;
   * route netlink unless `protocol` says otherwise (the framing is the same).
   */
  static open(netnsFd?: number, protocol = NETLINK_ROUTE): RtnlSocket {
    const create = () => RtnlSocket.createWithExtack(protocol);
    return new RtnlSocket(netnsFd === undefined ? create() : inNetnsFd(netnsFd, create));
  }

  private static createWithExtack(protocol: number): NetlinkFd {
    const fd = new NetlinkFd(protocol, REQUEST_TIMEOUT_SECONDS);
    enableExtack(fd.descriptor);
    return fd;
  }

  close(): void {
    this.fd.close();
  }

  /** The cookie of the namespace this socket belongs to (see sys/netns.ts). */
  netnsCookie(): bigint {
    return netnsCookieOf(this.fd.descriptor);
  }

  /**
   * Sends a request and gathers the replies up to the kernel's ACK; throws NetlinkError on
   * failure. Async only in signature: it completes before returning.
   */
  async request(operation: string, type: number, flags: number, payload: Buffer): Promise<NetlinkReply[]> {
    return this.exchange(operation, type, flags | NLM_F_REQUEST | NLM_F_ACK, payload);
  }

  /** A dump request: every object of one kind (links, addresses, routes). */
  async dump(operation: string, type: number, payload: Buffer): Promise<NetlinkReply[]> {
    return this.exchange(operation, type, NLM_F_DUMP | NLM_F_REQUEST | NLM_F_ACK, payload);
  }

  private exchange(operation: string, type: number, flags: number, payload: Buffer): NetlinkReply[] {
    this.seq = (this.seq + 1) >>> 0;
    const seq = this.seq;
    const header = Buffer.alloc(NLMSG_HDRLEN);
    header.writeUInt32LE(NLMSG_HDRLEN + payload.length, 0);
    header.writeUInt16LE(type, 4);
    header.writeUInt16LE(flags, 6);
    header.writeUInt32LE(seq, 8);
    this.fd.send(Buffer.concat([header, payload]));

    const replies: NetlinkReply[] = [];
    for (;;) {
      for (const m of splitMessages(this.fd.receive())) {
        // A reply to an earlier request that timed out: not ours to read.
        if (m.seq !== seq) continue;
        if (m.type === NLMSG_ERROR || m.type === NLMSG_DONE) {
          // Both carry an errno first: 0 is the ACK (or a complete dump).
          const errno = m.data.length >= 4 ? -m.data.readInt32LE(0) : 0;
          if (errno !== 0) throw new NetlinkError(operation, errno, extackMessage(m.data, m.flags, m.type));
          // A dump ends at DONE; its ACK (when the kernel sends one) follows in order and is
          // skipped by the sequence check of the next request.
          return replies;
        }
        replies.push({ type: m.type, data: m.data });
      }
    }
  }
}

/** The messages of one datagram (a dump batch holds many). */
function splitMessages(datagram: Buffer): NetlinkMessage[] {
  const out: NetlinkMessage[] = [];
  let offset = 0;
  while (offset + NLMSG_HDRLEN <= datagram.length) {
    const length = datagram.readUInt32LE(offset);
    if (length < NLMSG_HDRLEN || offset + length > datagram.length) break;
    out.push({
      type: datagram.readUInt16LE(offset + 4),
      flags: datagram.readUInt16LE(offset + 6),
      seq: datagram.readUInt32LE(offset + 8),
      data: datagram.subarray(offset + NLMSG_HDRLEN, offset + length),
    });
    offset += (length + 3) & ~3;
  }
  return out;
}

/**
 * Extended acks turn bare errnos into the kernel's own explanation; capped acks keep the
 * echo of a large request out of the reply. A kernel without them answers with errnos.
 */
function enableExtack(fd: number): void {
  try {
    setsockoptInt(fd, SOL_NETLINK, NETLINK_EXT_ACK, 1);
    setsockoptInt(fd, SOL_NETLINK, NETLINK_CAP_ACK, 1);
  } catch {
    // Plain errnos it is.
  }
}

/** Extracts NLMSGERR_ATTR_MSG from an error or DONE message, if the kernel sent one. */
function extackMessage(data: Buffer, flags: number, type: number): string | undefined {
  if (!(flags & NLM_F_ACK_TLVS)) return undefined;
  // NLMSG_ERROR: struct nlmsgerr (int error; struct nlmsghdr msg; unless capped, the
  // request's payload), then the TLVs. NLMSG_DONE: int error, then the TLVs.
  let tlvStart = 4;
  if (type === NLMSG_ERROR) tlvStart += flags & NLM_F_CAPPED ? NLMSG_HDRLEN : data.readUInt32LE(4);
  return readString(parseAttrs(data, (tlvStart + 3) & ~3).get(NLMSGERR_ATTR_MSG));
}
