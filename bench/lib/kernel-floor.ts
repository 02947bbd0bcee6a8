/**
 * What a pod's ADD+DEL costs before any of the plugin's own work, measured in the same run
 * as the cycles it bounds:
 * - the kernel's part: a veth pair created and deleted (ptp pays that too), and the one
 *   tcx link a pod of ours carries, attached and released. Each of the two waits for an
 *   RCU grace period under RTNL (tcx_entry_sync → synchronize_rcu), whatever the program;
 *   here it runs a two-instruction program on a pair in a namespace of its own;
 * - two process starts of a trivial executable compiled by the same Bun, the least an
 *   ADD and a DEL of the Bun executable can take before main().
 * bench/README.md's "Control plane" compares their sum with ptp's whole cycle.
 */
import { execFileSync, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import { createRequire } from "node:module";
import * as path from "node:path";
import { closeFd, linkCreate, progLoad } from "../../src/sys/bpf-syscall";
import { BPF_ATTACH_TYPE, BPF_PROG_TYPE } from "../../src/sys/bpf-uapi";
import { inNetns } from "../../src/sys/netns";
import type { BenchFixture } from "./cleanup";
import { type Summary, summarize } from "./stats";

export interface KernelFloor {
  vethCreateMs: Summary;
  tcxAttachMs: Summary;
  linkReleaseMs: Summary;
  vethDeleteMs: Summary;
  /** A trivial Bun-compiled executable, start to exit. */
  bunBareMs: Summary;
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

export function measureKernelFloor(fx: BenchFixture, n: number): KernelFloor {
  const netns = fx.makeNetns("nkf");
  const prog = passProgram();
  const rows = { create: [] as number[], attach: [] as number[], release: [] as number[], del: [] as number[] };
  try {
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
    bunBareMs: bunBareStart(fx, n),
  };
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
