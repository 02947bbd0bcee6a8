/**
 * A route-netlink socket bound to one network namespace, built on the `netlink` package's
 * transport (socket, sequence numbers, multipart assembly). We add what it lacks:
 * kernel errors as `NetlinkError` with errno and the extended-ack text ("Invalid MTU"),
 * dumps that drop the DONE marker, and opening the socket inside another netns.
 *
 * Never awaits while inside another netns: the socket is created synchronously there,
 * and all later traffic happens from the host namespace.
 */
import * as fs from "node:fs";
import * as os from "node:os";
// The transport module alone: the package index also loads nl80211, WireGuard and more.
import { createNetlink, type NetlinkSocket } from "netlink/dist/netlink";
import { setsockoptInt } from "../sys/libc";
import { inNetnsFd } from "../sys/netns";
import { parseAttrs, readString } from "./attrs";

const NETLINK_ROUTE = 0;
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

const REQUEST_TIMEOUT_MS = 10_000;

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

export class RtnlSocket {
  private constructor(private readonly sock: NetlinkSocket) {}

  /** Opens a socket in the caller's current namespace, or inside the netns open on `netnsFd`. */
  static open(netnsFd?: number): RtnlSocket {
    const create = () => RtnlSocket.createWithExtack();
    return new RtnlSocket(netnsFd === undefined ? create() : inNetnsFd(netnsFd, create));
  }

  private static createWithExtack(): NetlinkSocket {
    const sock = createNetlink(NETLINK_ROUTE);
    // The package hides the descriptor; every netlink socket this process holds is ours,
    // so extended acks are turned on for all of them (setsockopt fails on other sockets).
    for (const fd of openSockets()) enableExtack(fd);
    return sock;
  }

  close(): void {
    this.sock.close();
  }

  /** Sends a request and waits for the kernel's ACK; throws NetlinkError on failure. */
  async request(operation: string, type: number, flags: number, payload: Buffer): Promise<NetlinkReply[]> {
    const [msgs] = await this.sock.request(type, payload, {
      flags: flags | NLM_F_REQUEST | NLM_F_ACK,
      checkError: false,
      timeout: REQUEST_TIMEOUT_MS,
    });
    const replies: NetlinkReply[] = [];
    for (const m of msgs) {
      if (m.type === NLMSG_DONE) continue;
      if (m.type === NLMSG_ERROR) {
        const errno = -m.data.readInt32LE(0);
        if (errno === 0) continue;
        throw new NetlinkError(operation, errno, extackMessage(m.data, m.flags));
      }
      replies.push({ type: m.type, data: m.data });
    }
    return replies;
  }

  /** A dump request: every object of one kind (links, addresses, routes). */
  dump(operation: string, type: number, payload: Buffer): Promise<NetlinkReply[]> {
    return this.request(operation, type, NLM_F_DUMP, payload);
  }
}

/**
 * Extended acks turn bare errnos into the kernel's own explanation. False when `fd` is
 * not a netlink socket (or the kernel is too old to have them).
 */
function enableExtack(fd: number): boolean {
  try {
    setsockoptInt(fd, SOL_NETLINK, NETLINK_EXT_ACK, 1);
    setsockoptInt(fd, SOL_NETLINK, NETLINK_CAP_ACK, 1);
    return true;
  } catch {
    return false;
  }
}

/** Every socket descriptor this process holds. */
function openSockets(): number[] {
  const out: number[] = [];
  for (const fd of fs.readdirSync("/proc/self/fd")) {
    try {
      if (fs.readlinkSync(`/proc/self/fd/${fd}`).startsWith("socket:")) out.push(Number(fd));
    } catch {
      // The descriptor readdir itself used is gone by now.
    }
  }
  return out;
}

/** Extracts NLMSGERR_ATTR_MSG from an error message, if the kernel sent one. */
function extackMessage(data: Buffer, flags: number): string | undefined {
  if (!(flags & NLM_F_ACK_TLVS)) return undefined;
  // struct nlmsgerr: int error; struct nlmsghdr msg; then (unless capped) the payload.
  const origLen = data.readUInt32LE(4);
  const tlvStart = 4 + (flags & NLM_F_CAPPED ? 16 : origLen);
  return readString(parseAttrs(data, (tlvStart + 3) & ~3).get(NLMSGERR_ATTR_MSG));
}
