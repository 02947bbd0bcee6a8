/**
 * tc's clsact hook (include/uapi/linux/pkt_cls.h, pkt_sched.h, rtnetlink.h): a device's
 * clsact qdisc, and eBPF programs on its ingress or egress as direct-action cls_bpf
 * filters, one per priority, each under handle 1 so that it can be replaced in place.
 *
 * Why this hook beside tcx: a filter is published under RCU and freed by call_rcu, so
 * neither adding nor deleting one waits for a grace period, where a tcx link waits for
 * one on attach and again on release (bench/README.md's floor line: 0.4 ms for the qdisc
 * and the filter against 11-14 ms for the link). Unlike a link, a filter has no owner:
 * whoever may change the device's qdiscs may remove it.
 */
import { attrNested, attrString, attrU32, parseAttrs, readString, readU32 } from "./attrs";
import { tcmsg } from "./qdisc";
import { NetlinkError, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, type RtnlSocket } from "./socket";

const RTM_NEWQDISC = 36;
const RTM_NEWTFILTER = 44;
const RTM_DELTFILTER = 45;
const RTM_GETTFILTER = 46;
const TCA_KIND = 1;
const TCA_OPTIONS = 2;
// pkt_cls.h: enum { TCA_BPF_UNSPEC, TCA_BPF_ACT, TCA_BPF_POLICE, TCA_BPF_CLASSID,
// TCA_BPF_OPS_LEN, TCA_BPF_OPS, TCA_BPF_FD, TCA_BPF_NAME, TCA_BPF_FLAGS,
// TCA_BPF_FLAGS_GEN, TCA_BPF_TAG, TCA_BPF_ID }.
const TCA_BPF_FD = 6;
const TCA_BPF_NAME = 7;
const TCA_BPF_FLAGS = 8;
const TCA_BPF_ID = 11;
const TCA_BPF_FLAG_ACT_DIRECT = 1;
const EEXIST = 17;
const ENOENT = 2;
const EINVAL = 22;

/** pkt_sched.h: TC_H_CLSACT, and clsact's two hooks as filter parents (TC_H_MIN_INGRESS,
 * TC_H_MIN_EGRESS under it). */
const TC_H_CLSACT = 0xfffffff1;
const CLSACT_HANDLE = 0xffff0000;
const HOOK_PARENT = { ingress: 0xfffffff2, egress: 0xfffffff3 } as const;
/** Every filter of ours is handle 1 of its priority: replacing it names it. */
const FILTER_HANDLE = 1;
/** ETH_P_ALL in network byte order: the filter sees every frame, of whatever protocol. */
const ETH_P_ALL_BE = 0x0300;

export type TcHook = keyof typeof HOOK_PARENT;

export interface BpfFilter {
  hook: TcHook;
  /** Lower runs first. */
  priority: number;
  /** The kernel's id of the program the filter runs. */
  programId: number;
  /** The name the filter was given (the program's, by our convention). */
  name: string;
  directAction: boolean;
}

/** tcm_info of a filter: its priority in the upper half, its protocol in the lower. */
const filterInfo = (priority: number) => ((priority << 16) | ETH_P_ALL_BE) >>> 0;

function filterHeader(ifindex: number, hook: TcHook, priority: number, handle: number): Buffer {
  const msg = tcmsg(ifindex, handle, HOOK_PARENT[hook]);
  msg.writeUInt32LE(filterInfo(priority), 16);
  return msg;
}

/** RTM_NEWTFILTER's payload for `progFd` as a direct-action filter (exported for its test). */
export function bpfFilterMessage(
  ifindex: number,
  hook: TcHook,
  priority: number,
  progFd: number,
  name: string,
): Buffer {
  return Buffer.concat([
    filterHeader(ifindex, hook, priority, FILTER_HANDLE),
    attrString(TCA_KIND, "bpf"),
    attrNested(TCA_OPTIONS, [
      attrU32(TCA_BPF_FD, progFd),
      attrString(TCA_BPF_NAME, name),
      attrU32(TCA_BPF_FLAGS, TCA_BPF_FLAG_ACT_DIRECT),
    ]),
  ]);
}

/** Gives the device a clsact qdisc unless it has one. */
export async function ensureClsact(sock: RtnlSocket, ifindex: number): Promise<void> {
  try {
    await sock.request(
      `add clsact qdisc on ifindex ${ifindex}`,
      RTM_NEWQDISC,
      NLM_F_CREATE | NLM_F_EXCL,
      Buffer.concat([tcmsg(ifindex, CLSACT_HANDLE, TC_H_CLSACT), attrString(TCA_KIND, "clsact")]),
    );
  } catch (e) {
    if (!(e instanceof NetlinkError && e.errno === EEXIST)) throw e;
  }
}

/**
 * Runs `progFd` on the device's `hook` at `priority`, in place of the filter there if
 * there is one (the swap is atomic: no frame passes the hook unfiltered). The device needs
 * its clsact qdisc first (ensureClsact).
 */
export async function attachBpfFilter(
  sock: RtnlSocket,
  ifindex: number,
  hook: TcHook,
  priority: number,
  progFd: number,
  name: string,
): Promise<void> {
  await sock.request(
    `add bpf filter ${name} on ifindex ${ifindex} ${hook}`,
    RTM_NEWTFILTER,
    NLM_F_CREATE | NLM_F_REPLACE,
    bpfFilterMessage(ifindex, hook, priority, progFd, name),
  );
}

/** The eBPF filters on the device's `hook`, in priority order; none without clsact. */
export async function listBpfFilters(sock: RtnlSocket, ifindex: number, hook: TcHook): Promise<BpfFilter[]> {
  let replies: Awaited<ReturnType<RtnlSocket["dump"]>>;
  try {
    replies = await sock.dump(
      `list filters on ifindex ${ifindex} ${hook}`,
      RTM_GETTFILTER,
      tcmsg(ifindex, 0, HOOK_PARENT[hook]),
    );
  } catch (e) {
    // No clsact, so no hook to list: the kernel says EINVAL or ENOENT. A device that is
    // gone (ENODEV) is the caller's to judge, and is thrown.
    if (e instanceof NetlinkError && (e.errno === EINVAL || e.errno === ENOENT)) return [];
    throw e;
  }
  return replies
    .filter((r) => r.type === RTM_NEWTFILTER)
    .flatMap((r): BpfFilter[] => parseBpfFilter(r.data, ifindex, hook))
    .sort((a, b) => a.priority - b.priority);
}

/** One RTM_NEWTFILTER of a dump, when it is a bpf filter with its program (a priority's
 * header entry has no options). Exported for its test. */
export function parseBpfFilter(data: Buffer, ifindex: number, hook: TcHook): BpfFilter[] {
  if (data.length < 20 || data.readInt32LE(4) !== ifindex) return [];
  const attrs = parseAttrs(data, 20);
  if (readString(attrs.get(TCA_KIND)) !== "bpf") return [];
  const options = attrs.get(TCA_OPTIONS);
  if (!options) return [];
  const o = parseAttrs(options);
  const programId = readU32(o.get(TCA_BPF_ID));
  if (programId === undefined) return [];
  return [
    {
      hook,
      priority: data.readUInt32LE(16) >>> 16,
      programId,
      name: readString(o.get(TCA_BPF_NAME)) ?? "",
      directAction: ((readU32(o.get(TCA_BPF_FLAGS)) ?? 0) & TCA_BPF_FLAG_ACT_DIRECT) !== 0,
    },
  ];
}

/** Removes the filter at `priority` on the device's `hook`; false when there was none. */
export async function deleteBpfFilter(
  sock: RtnlSocket,
  ifindex: number,
  hook: TcHook,
  priority: number,
): Promise<boolean> {
  try {
    await sock.request(
      `delete filter on ifindex ${ifindex} ${hook} priority ${priority}`,
      RTM_DELTFILTER,
      0,
      Buffer.concat([filterHeader(ifindex, hook, priority, 0), attrString(TCA_KIND, "bpf")]),
    );
    return true;
  } catch (e) {
    if (e instanceof NetlinkError && (e.errno === ENOENT || e.errno === EINVAL)) return false;
    throw e;
  }
}
