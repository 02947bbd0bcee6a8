/**
 * Queueing disciplines (struct tcmsg + TCA_* attributes): list a device's, add one, delete
 * one. Only what pacing needs (datapath/shaping.ts): qdiscs without options, such as fq
 * and mq with their defaults.
 */
import { attrString, parseAttrs, readString } from "./attrs";
import { NetlinkError, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, type RtnlSocket } from "./socket";

const RTM_NEWQDISC = 36;
const RTM_DELQDISC = 37;
const RTM_GETQDISC = 38;
const TCA_KIND = 1;
const TCMSG_SIZE = 20;
const ENOENT = 2;
const EINVAL = 22;

/** The parent of a device's root qdisc. */
export const TC_H_ROOT = 0xffffffff;

/** A handle "major:minor" as tc writes it, from its two 16-bit halves. */
export const tcHandle = (major: number, minor: number) => ((major << 16) | minor) >>> 0;
export const tcMajor = (handle: number) => handle >>> 16;

export interface Qdisc {
  ifindex: number;
  /** 0 for the qdiscs the kernel attaches by itself (the device's default). */
  handle: number;
  parent: number;
  kind: string;
}

/** struct tcmsg: family, two pad bytes and a pad u16, ifindex, handle, parent, info. */
export function tcmsg(ifindex: number, handle: number, parent: number): Buffer {
  const b = Buffer.alloc(TCMSG_SIZE);
  b.writeInt32LE(ifindex, 4);
  b.writeUInt32LE(handle >>> 0, 8);
  b.writeUInt32LE(parent >>> 0, 12);
  return b;
}

export function parseQdisc(data: Buffer): Qdisc {
  return {
    ifindex: data.readInt32LE(4),
    handle: data.readUInt32LE(8),
    parent: data.readUInt32LE(12),
    kind: readString(parseAttrs(data, TCMSG_SIZE).get(TCA_KIND)) ?? "",
  };
}

/** The qdiscs of one device: its root, and under a classful root (mq) its children. */
export async function listQdiscs(sock: RtnlSocket, ifindex: number): Promise<Qdisc[]> {
  const replies = await sock.dump("list qdiscs", RTM_GETQDISC, tcmsg(ifindex, 0, 0));
  return replies
    .filter((r) => r.type === RTM_NEWQDISC)
    .map((r) => parseQdisc(r.data))
    .filter((q) => q.ifindex === ifindex);
}

export interface NewQdisc {
  ifindex: number;
  parent: number;
  /** 0: the kernel picks one. */
  handle: number;
  kind: string;
}

/**
 * Adds a qdisc without options at `parent`. The device's default qdisc there (handle 0) is
 * replaced; with `replaceAny`, so is any other (an mq's default children are grafted over).
 */
export async function addQdisc(sock: RtnlSocket, q: NewQdisc, replaceAny = false): Promise<void> {
  await sock.request(
    `add qdisc ${q.kind} on ifindex ${q.ifindex}`,
    RTM_NEWQDISC,
    NLM_F_CREATE | (replaceAny ? NLM_F_REPLACE : NLM_F_EXCL),
    Buffer.concat([tcmsg(q.ifindex, q.handle, q.parent), attrString(TCA_KIND, q.kind)]),
  );
}

/** Deletes the qdisc `handle` at `parent` (the kernel puts the default back at the root);
 * false when there was none. */
export async function deleteQdisc(sock: RtnlSocket, ifindex: number, parent: number, handle: number): Promise<boolean> {
  try {
    await sock.request(`delete qdisc on ifindex ${ifindex}`, RTM_DELQDISC, 0, tcmsg(ifindex, handle, parent));
    return true;
  } catch (e) {
    // ENOENT: no qdisc with that handle; EINVAL: only the default is there (handle 0).
    if (e instanceof NetlinkError && (e.errno === ENOENT || e.errno === EINVAL)) return false;
    throw e;
  }
}
