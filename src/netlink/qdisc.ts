/**
 * Queueing disciplines (struct tcmsg + TCA_* attributes): list a device's, add one, delete
 * one. Only what rate limits need (datapath/shaping.ts, datapath/pod-shaping.ts): fq and
 * mq with their defaults, and tbf with a rate, a burst and a queue bound.
 */
import { type Attr, attr, attrNested, attrString, parseAttrs, readString } from "./attrs";
import { NetlinkError, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, type RtnlSocket } from "./socket";

const RTM_NEWQDISC = 36;
const RTM_DELQDISC = 37;
const RTM_GETQDISC = 38;
const TCA_KIND = 1;
const TCA_OPTIONS = 2;
// include/uapi/linux/pkt_sched.h: TCA_TBF_*, struct tc_tbf_qopt, TC_LINKLAYER_ETHERNET.
const TCA_TBF_PARMS = 1;
const TCA_TBF_RATE64 = 4;
const TCA_TBF_BURST = 6;
const TC_TBF_QOPT_SIZE = 36;
const TC_LINKLAYER_ETHERNET = 1;
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
  /** TCA_OPTIONS' contents; absent: the kind's defaults. */
  options?: Attr[];
}

/** A token bucket filter's settings, in bytes: what `tc qdisc add ... tbf rate R burst B
 * limit L` sets. */
export interface TbfSettings {
  /** Bytes per second. */
  rate: number;
  /** Bytes that may leave at once after a pause; also the largest packet it sends whole
   * (a larger GSO packet is segmented first). */
  burst: number;
  /** Bytes that may wait; more are dropped. */
  limit: number;
}

/**
 * TCA_OPTIONS for tbf: struct tc_tbf_qopt with the rate (its link layer named, so the
 * kernel wants no rate table) and the queue bound, the rate again as a u64 (the struct
 * holds 32 bits), and the burst in bytes (the struct holds it as time, in scheduler ticks).
 */
export function tbfOptions(t: TbfSettings): Attr[] {
  const qopt = Buffer.alloc(TC_TBF_QOPT_SIZE);
  qopt.writeUInt8(TC_LINKLAYER_ETHERNET, 1);
  qopt.writeUInt32LE(Math.min(t.rate, 0xffffffff), 8);
  qopt.writeUInt32LE(Math.min(t.limit, 0xffffffff), 24);
  const rate64 = Buffer.alloc(8);
  rate64.writeBigUInt64LE(BigInt(t.rate));
  const burst = Buffer.alloc(4);
  burst.writeUInt32LE(Math.min(t.burst, 0xffffffff));
  return [attr(TCA_TBF_PARMS, qopt), attr(TCA_TBF_RATE64, rate64), attr(TCA_TBF_BURST, burst)];
}

/**
 * Adds a qdisc at `parent`. The device's default qdisc there (handle 0) is
 * replaced; with `replaceAny`, so is any other (an mq's default children are grafted over).
 */
export async function addQdisc(sock: RtnlSocket, q: NewQdisc, replaceAny = false): Promise<void> {
  await sock.request(
    `add qdisc ${q.kind} on ifindex ${q.ifindex}`,
    RTM_NEWQDISC,
    NLM_F_CREATE | (replaceAny ? NLM_F_REPLACE : NLM_F_EXCL),
    Buffer.concat([
      tcmsg(q.ifindex, q.handle, q.parent),
      attrString(TCA_KIND, q.kind),
      ...(q.options ? [attrNested(TCA_OPTIONS, q.options)] : []),
    ]),
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
