/**
 * The other hook a veth pod's program could run at: a cls_bpf filter in direct-action mode
 * on a clsact qdisc (tc's hook before tcx, still Cilium's on kernels without tcx). Unlike
 * a tcx link, adding one publishes the filter under RCU without waiting for a grace
 * period; removing one frees it by call_rcu. Measured the way kernel-floor.ts measures the
 * tcx link, by netlink from this process on a fresh pair in a namespace of its own, so the
 * two figures compare like with like. The filter's messages (include/uapi/linux/pkt_cls.h,
 * rtnetlink.h) are encoded here: only the bench uses them.
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import { attr, attrNested, attrString, attrU32 } from "../../src/netlink/attrs";
import { getLinkByName } from "../../src/netlink/links";
import { addQdisc, tcmsg } from "../../src/netlink/qdisc";
import { NLM_F_CREATE, NLM_F_EXCL, RtnlSocket } from "../../src/netlink/socket";
import { openNetns } from "../../src/sys/netns";
import type { BenchFixture } from "./cleanup";
import { type Summary, summarize } from "./stats";

const RTM_NEWTFILTER = 44;
const RTM_DELTFILTER = 45;
const TCA_KIND = 1;
const TCA_OPTIONS = 2;
const TCA_BPF_FD = 6;
const TCA_BPF_NAME = 7;
const TCA_BPF_FLAGS = 8;
const TCA_BPF_FLAG_ACT_DIRECT = 1;
/** clsact's parent and handle, and its ingress hook (TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS)). */
const TC_H_CLSACT = 0xfffffff1;
const CLSACT_HANDLE = 0xffff0000;
const TC_H_CLSACT_INGRESS = 0xfffffff2;
/** tcm_info: the filter's priority in the upper half, its protocol (ETH_P_ALL, network
 * order) in the lower. */
const FILTER_INFO = ((1 << 16) | 0x0300) >>> 0;

export interface TcHookFloor {
  /** The clsact qdisc added to the host end (once per device). */
  qdiscMs: Summary;
  /** The program's filter added on clsact's ingress. */
  filterAttachMs: Summary;
  /** The filter deleted. */
  filterReleaseMs: Summary;
}

function tcmsgWithInfo(ifindex: number): Buffer {
  const msg = tcmsg(ifindex, 0, TC_H_CLSACT_INGRESS);
  msg.writeUInt32LE(FILTER_INFO, 16);
  return msg;
}

/** `n` rounds on a fresh pair each: clsact added, the program's filter added, then deleted. */
export async function measureTcHook(fx: BenchFixture, n: number, progFd: number): Promise<TcHookFloor> {
  const netns = fx.makeNetns("nkft");
  const rows = { qdisc: [] as number[], attach: [] as number[], release: [] as number[] };
  const ip = (...args: string[]) => execFileSync("ip", ["-n", netns, ...args]);
  const netnsFd = openNetns(`/run/netns/${netns}`);
  const sock = RtnlSocket.open(netnsFd);
  try {
    for (let i = 0; i < n; i++) {
      ip("link", "add", "nkft0", "type", "veth", "peer", "name", "nkft1");
      const dev = await getLinkByName(sock, "nkft0");
      if (!dev) throw new Error("nkft0 missing after its creation");
      rows.qdisc.push(
        await timed(() =>
          addQdisc(sock, { ifindex: dev.index, parent: TC_H_CLSACT, handle: CLSACT_HANDLE, kind: "clsact" }),
        ),
      );
      const fd = Buffer.alloc(4);
      fd.writeUInt32LE(progFd);
      const add = Buffer.concat([
        tcmsgWithInfo(dev.index),
        attrString(TCA_KIND, "bpf"),
        attrNested(TCA_OPTIONS, [
          attr(TCA_BPF_FD, fd),
          attrString(TCA_BPF_NAME, "nkb_floor"),
          attrU32(TCA_BPF_FLAGS, TCA_BPF_FLAG_ACT_DIRECT),
        ]),
      ]);
      rows.attach.push(
        await timed(() => sock.request("add bpf filter", RTM_NEWTFILTER, NLM_F_CREATE | NLM_F_EXCL, add)),
      );
      const del = Buffer.concat([tcmsgWithInfo(dev.index), attrString(TCA_KIND, "bpf")]);
      rows.release.push(await timed(() => sock.request("delete bpf filter", RTM_DELTFILTER, 0, del)));
      ip("link", "del", "nkft0");
    }
  } finally {
    sock.close();
    fs.closeSync(netnsFd);
  }
  return {
    qdiscMs: summarize(rows.qdisc),
    filterAttachMs: summarize(rows.attach),
    filterReleaseMs: summarize(rows.release),
  };
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t0) / 1e6;
}
