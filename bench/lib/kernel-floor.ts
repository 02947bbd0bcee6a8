/**
 * What a pod's ADD+DEL costs before any of the plugin's own work, measured in the same run
 * as the cycles it bounds:
 * - the kernel's part: a veth pair created and deleted (ptp pays that too), and the one
 *   tcx link a pod of ours carries, attached and released. Each of the two waits for an
 *   RCU grace period under RTNL (tcx_entry_sync → synchronize_rcu), whatever the program;
 *   here it runs a two-instruction program on a pair in a namespace of its own;
 * - what a pair made ahead would cost an ADD instead of the attachments: moving its pod
 *   end into the pod's namespace (one RTM_NEWLINK with the namespace and the final name),
 *   which waits out pending RCU callbacks (rcu_barrier in __dev_change_net_namespace);
 * - the same program on tc's clsact hook (tc-hook-floor.ts), which waits for no grace period;
 * - two process starts of a trivial executable compiled by the same Bun, the least an
 *   ADD and a DEL of the Bun executable can take before main();
 * - the storm's part: as many tcx attachments as the storm has pods, made as many at a time
 *   as the storm runs ADDs. RTNL is held through each attachment's grace periods, so they
 *   queue one behind another whoever makes them.
 * bench/README.md's "Control plane" compares the cycle's floor with ptp's whole cycle, and
 * the storm's with ptp's whole storm.
 */
import { execFile, execFileSync, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import { createRequire } from "node:module";
import * as path from "node:path";
import { createPair, deleteLinkByName, getLinkByName, moveLink } from "../../src/netlink/links";
import { RtnlSocket } from "../../src/netlink/socket";
import { closeFd, linkCreate, objPin, progLoad } from "../../src/sys/bpf-syscall";
import { BPF_ATTACH_TYPE, BPF_PROG_TYPE } from "../../src/sys/bpf-uapi";
import { inNetns, openNetns } from "../../src/sys/netns";
import type { BenchFixture } from "./cleanup";
import { pool } from "./pool";
import { type Summary, summarize } from "./stats";
import { measureTcHook, type TcHookFloor } from "./tc-hook-floor";

export interface KernelFloor {
  vethCreateMs: Summary;
  tcxAttachMs: Summary;
  linkReleaseMs: Summary;
  vethDeleteMs: Summary;
  /** A pair's end moved into another namespace under a new name (absent in older results). */
  vethMoveMs?: Summary;
  /** The same program on tc's clsact hook instead (absent in older results). */
  tcHook?: TcHookFloor;
  /** A trivial Bun-compiled executable, start to exit. */
  bunBareMs: Summary;
  /** Absent in results from before it was measured, and in runs without a storm. */
  attachStorm?: AttachStormFloor;
}

/** Wall times of one storm's worth of tcx attachments, and of the processes alone. */
export interface AttachStormFloor {
  pods: number;
  concurrency: number;
  /** `pods` bpftool processes, `concurrency` at a time, each attaching the program to its own pair. */
  attachWallMs: number[];
  /** The same processes running `bpftool version`: their own share of the wall time. */
  processWallMs: number[];
}

/** r0 = -1 (TCX_NEXT); exit. */
function passProgram(): number {
  const insns = Buffer.alloc(16);
  insns.writeUInt8(0xb7, 0);
  insns.writeInt32LE(-1, 4);
  insns.writeUInt8(0x95, 8);
  return progLoad({
    progType: BPF_PROG_TYPE.SCHED_CLS,
    insns,
    license: "GPL",
    name: "nkb_floor",
    expectedAttachType: BPF_ATTACH_TYPE.TCX_INGRESS,
    logLevel: 0,
    logSize: 0,
  });
}

const elapsed = (fn: () => void): number => {
  const t0 = process.hrtime.bigint();
  fn();
  return Number(process.hrtime.bigint() - t0) / 1e6;
};

export async function measureKernelFloor(fx: BenchFixture, n: number): Promise<KernelFloor> {
  const netns = fx.makeNetns("nkf");
  const prog = passProgram();
  const rows = { create: [] as number[], attach: [] as number[], release: [] as number[], del: [] as number[] };
  let vethMoveMs: Summary;
  let tcHook: TcHookFloor;
  try {
    vethMoveMs = await measureMove(fx, n);
    tcHook = await measureTcHook(fx, n, prog);
    // The attach names the device by ifindex in the caller's namespace.
    inNetns(`/run/netns/${netns}`, () => {
      for (let i = 0; i < n; i++) {
        const ip = (...args: string[]) => execFileSync("ip", ["-n", netns, ...args]);
        rows.create.push(elapsed(() => ip("link", "add", "nkf0", "type", "veth", "peer", "name", "nkf1")));
        // Not /sys/class/net: sysfs shows the namespace it was mounted in.
        const [dev] = JSON.parse(ip("-j", "link", "show", "nkf0").toString("utf8")) as { ifindex: number }[];
        const ifindex = dev?.ifindex ?? Number.NaN;
        let link = -1;
        rows.attach.push(
          elapsed(() => {
            link = linkCreate({ progFd: prog, targetIfindex: ifindex, attachType: BPF_ATTACH_TYPE.TCX_INGRESS });
          }),
        );
        rows.release.push(elapsed(() => closeFd(link)));
        rows.del.push(elapsed(() => ip("link", "del", "nkf0")));
      }
    });
  } finally {
    closeFd(prog);
  }
  return {
    vethCreateMs: summarize(rows.create),
    tcxAttachMs: summarize(rows.attach),
    linkReleaseMs: summarize(rows.release),
    vethDeleteMs: summarize(rows.del),
    vethMoveMs,
    tcHook,
    bunBareMs: bunBareStart(fx, n),
  };
}

/**
 * A pair made in one namespace with its peer in a second (no move), then the peer moved
 * into a third under a new name, by netlink from this process: the move alone is timed.
 */
async function measureMove(fx: BenchFixture, n: number): Promise<Summary> {
  const [home, holding, pod] = ["nkfh", "nkfw", "nkfp"].map((label) => openNetns(`/run/netns/${fx.makeNetns(label)}`));
  const sockets = [home, holding].map((fd) => RtnlSocket.open(fd));
  const [homeSock, holdingSock] = sockets;
  const ms: number[] = [];
  try {
    if (!homeSock || !holdingSock || home === undefined || holding === undefined || pod === undefined) {
      throw new Error("namespaces for the move not opened");
    }
    for (let i = 0; i < n; i++) {
      await createPair(homeSock, "veth", { name: "nkfm0" }, { name: "nkfm1" }, holding);
      const end = await getLinkByName(holdingSock, "nkfm1");
      if (!end) throw new Error("nkfm1 missing after its creation");
      const t0 = process.hrtime.bigint();
      await moveLink(holdingSock, end, pod, { name: "eth0" });
      ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
      await deleteLinkByName(homeSock, "nkfm0");
    }
  } finally {
    for (const sock of sockets) sock.close();
    for (const fd of [home, holding, pod]) if (fd !== undefined) fs.closeSync(fd);
  }
  return summarize(ms);
}

function bunBareStart(fx: BenchFixture, n: number): Summary {
  const require = createRequire(__filename);
  const bun = path.join(path.dirname(require.resolve("@oven/bun-linux-x64/package.json")), "bin/bun");
  const dir = fx.tempDir("nkb-bun-bare-");
  fs.writeFileSync(path.join(dir, "bare.js"), "process.exitCode = 0;\n");
  const exe = path.join(dir, "bare");
  // The flags dist/netkit-cni is built with (scripts/build.mjs) that change a start.
  execFileSync(bun, ["build", "--compile", "--bytecode", "--compile-jit-policy=100", "bare.js", "--outfile", exe], {
    cwd: dir,
    stdio: "ignore",
  });
  spawnSync(exe); // into the page cache, as the plugin is by its warm-up ADD
  const ms: number[] = [];
  for (let i = 0; i < n; i++) ms.push(elapsed(() => spawnSync(exe, [], { stdio: "ignore" })));
  return summarize(ms);
}

/**
 * bpftool makes each attachment (a program attach: the same tcx_entry_sync and commit, two
 * grace periods with RTNL held, as the link a pod carries), one process per pair, so that
 * the attachments are made concurrently as a storm's ADDs make theirs.
 */
export async function measureAttachStorm(
  fx: BenchFixture,
  pods: number,
  concurrency: number,
  rounds: number,
): Promise<AttachStormFloor> {
  const netns = fx.makeNetns("nkfs");
  const pin = path.join(fx.bpffsRoot, "floor-pass");
  fs.mkdirSync(fx.bpffsRoot, { recursive: true });
  const prog = passProgram();
  try {
    objPin(prog, pin);
  } finally {
    closeFd(prog);
  }
  const indices = Array.from({ length: pods }, (_, i) => i);
  // One ip(8) for all the pairs: their creation is not what is measured.
  const batch = (verb: (i: number) => string) =>
    execFileSync("ip", ["-n", netns, "-batch", "-"], { input: indices.map(verb).join("\n") });
  const inNode = (args: string[]) =>
    new Promise<void>((resolve, reject) => {
      execFile("nsenter", [`--net=/run/netns/${netns}`, ...args], (err) => (err ? reject(err) : resolve()));
    });
  const wall = async (args: (i: number) => string[]): Promise<number> => {
    const t0 = process.hrtime.bigint();
    await pool(indices, concurrency, (i) => inNode(args(i)));
    return Number(process.hrtime.bigint() - t0) / 1e6;
  };
  const out: AttachStormFloor = { pods, concurrency, attachWallMs: [], processWallMs: [] };
  for (let round = 0; round < rounds; round++) {
    batch((i) => `link add nkfs${i} type veth peer name nkfp${i}`);
    out.processWallMs.push(await wall(() => ["bpftool", "version"]));
    out.attachWallMs.push(
      await wall((i) => ["bpftool", "net", "attach", "tcx_ingress", "pinned", pin, "dev", `nkfs${i}`]),
    );
    batch((i) => `link del nkfs${i}`);
  }
  fs.rmSync(pin, { force: true });
  return out;
}
