/**
 * The other hook a veth pod's program could run at: a cls_bpf filter in direct-action mode
 * on a clsact qdisc (src/netlink/tc-filter.ts; tc's hook before tcx, still Cilium's on
 * kernels without tcx). Unlike a tcx link, adding one publishes the filter under RCU
 * without waiting for a grace period, and deleting one frees it by call_rcu. Measured the
 * way kernel-floor.ts measures the tcx link, by netlink from this process on a fresh pair
 * in a namespace of its own, so that the two figures compare like with like.
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import { getLinkByName } from "../../src/netlink/links";
import { RtnlSocket } from "../../src/netlink/socket";
import { attachBpfFilter, deleteBpfFilter, ensureClsact } from "../../src/netlink/tc-filter";
import { openNetns } from "../../src/sys/netns";
import type { BenchFixture } from "./cleanup";
import { type Summary, summarize } from "./stats";

export interface TcHookFloor {
  /** The clsact qdisc added to the host end (once per device). */
  qdiscMs: Summary;
  /** The program's filter added on clsact's ingress. */
  filterAttachMs: Summary;
  /** The filter deleted. */
  filterReleaseMs: Summary;
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
      rows.qdisc.push(await timed(() => ensureClsact(sock, dev.index)));
      rows.attach.push(await timed(() => attachBpfFilter(sock, dev.index, "ingress", 1, progFd, "nkb_floor")));
      rows.release.push(
        await timed(async () => {
          if (!(await deleteBpfFilter(sock, dev.index, "ingress", 1)))
            throw new Error("the floor's filter was not there");
        }),
      );
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
