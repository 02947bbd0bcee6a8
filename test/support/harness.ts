/**
 * Test fixtures for driving the built `netkit-cni` executable exactly as a runtime does:
 * env + stdin, inside a "node" network namespace of the test's own (so nothing touches
 * the machine's real network), against pod namespaces the test creates. Everything a
 * test creates is registered and removed in `cleanup()`, which tests call from afterEach
 * so a failing assertion still leaves nothing behind.
 */
import { execFileSync, spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { nodeLockPath } from "../../src/datapath/node-datapath";
import { sockBypassNotePath } from "../../src/datapath/sockbypass";
import { queueDirOf } from "../../src/sys/file-lock";

/**
 * The executable under test: the Bun-compiled build (dist/netkit-cni, the default), or
 * the Node SEA build when NETKIT_CNI_TEST_BINARY=node (`make test` runs both).
 */
export const BINARY = path.resolve(
  __dirname,
  process.env.NETKIT_CNI_TEST_BINARY === "node" ? "../../dist/netkit-cni-node" : "../../dist/netkit-cni",
);
let pluginBinary = BINARY;

/** Runs `fn` with another build of the executable as the plugin (the bench's baseline). */
export function withPluginBinary<T>(binary: string, fn: () => T): T {
  const before = pluginBinary;
  pluginBinary = binary;
  try {
    return fn();
  } finally {
    pluginBinary = before;
  }
}
export const CNI_PATH = "/usr/lib/cni";

/**
 * The device kind the suite builds pods with: veth on this kernel; the netkit VM run
 * sets NETKIT_CNI_TEST_DATAPATH=netkit and the same tests then prove the netkit datapath.
 */
export const TEST_DATAPATH = process.env.NETKIT_CNI_TEST_DATAPATH === "netkit" ? "netkit" : "veth";

let counter = 0;
/** A short name unique to this process: netns and link names must stay short. */
export function uniqueName(prefix: string): string {
  counter += 1;
  return `${prefix}${process.pid.toString(36)}${counter.toString(36)}`;
}

export function sh(cmd: string, args: string[]): string {
  return execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

/** Runs a command in a netns without remounting /sys (unlike `ip netns exec`). */
export function inNs(netns: string, cmd: string, args: string[]): string {
  return sh("nsenter", [`--net=/run/netns/${netns}`, cmd, ...args]);
}

export function trySh(cmd: string, args: string[]): { ok: boolean; out: string } {
  const r = spawnSync(cmd, args, { encoding: "utf8" });
  return { ok: r.status === 0, out: `${r.stdout}${r.stderr}` };
}

export interface PluginRun {
  status: number | null;
  stdout: string;
  json: Record<string, unknown> | undefined;
}

export interface Attachment {
  containerId: string;
  ifname: string;
  /** Path of the pod netns, "" for a DEL after it is gone. */
  netns: string;
}

/** Everything one test made; `cleanup()` removes it all. */
export class Fixture {
  readonly netnses: string[] = [];
  readonly dirs: string[] = [];
  /** This fixture's bpffs root: tests never touch the node's real one. */
  readonly bpffsRoot = `/sys/fs/bpf/${uniqueName("nkt")}`;
  readonly extraBpffsRoots: string[] = [];
  /** Background processes (servers) to kill. */
  readonly processes: { kill(): void }[] = [];
  /** Undos of what a test changed beyond the above (firewall rules), run first, last added first. */
  readonly undos: (() => void)[] = [];

  /**
   * A node: its own netns with lo up and an uplink carrying the node's addresses (a veth
   * whose far end stays in the node too: this kernel may lack the dummy driver).
   */
  makeNode(v4: string, v6: string): string {
    const node = this.makeNetns("nkn");
    inNs(node, "ip", ["link", "set", "lo", "up"]);
    inNs(node, "ip", ["link", "add", "uplink0", "type", "veth", "peer", "name", "uplink0p"]);
    inNs(node, "ip", ["link", "set", "uplink0p", "up"]);
    inNs(node, "ip", ["link", "set", "uplink0", "up"]);
    inNs(node, "ip", ["addr", "add", `${v4}/32`, "dev", "uplink0"]);
    inNs(node, "ip", ["-6", "addr", "add", `${v6}/128`, "dev", "uplink0", "nodad"]);
    return node;
  }

  makeNetns(prefix = "nkp"): string {
    const name = uniqueName(prefix);
    sh("ip", ["netns", "add", name]);
    this.netnses.push(name);
    return name;
  }

  deleteNetns(name: string): void {
    sh("ip", ["netns", "del", name]);
    this.netnses.splice(this.netnses.indexOf(name), 1);
  }

  tempDir(prefix: string): string {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
    this.dirs.push(dir);
    return dir;
  }

  cleanup(): void {
    for (const undo of this.undos.splice(0).reverse()) {
      try {
        undo();
      } catch {
        // the rest must still go
      }
    }
    for (const p of this.processes.splice(0)) p.kill();
    for (const ns of this.netnses) removePacingState(ns);
    for (const ns of this.netnses.splice(0)) trySh("ip", ["netns", "del", ns]);
    for (const dir of this.dirs.splice(0)) {
      for (const lock of storeLocks(dir)) removeLockQueue(lock);
      fs.rmSync(dir, { recursive: true, force: true });
    }
    for (const root of [this.bpffsRoot, ...this.extraBpffsRoots.splice(0)]) {
      fs.rmSync(root, { recursive: true, force: true });
      removeLockQueue(nodeLockPath(root));
      fs.rmSync(nodeLockPath(root), { force: true });
      fs.rmSync(sockBypassNotePath(root), { force: true });
    }
  }
}

/** The IPAM store locks in a fixture directory used as a dataDir: <dir>/<network>/lock. */
function storeLocks(dir: string): string[] {
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
  return entries
    .filter((e) => e.isDirectory())
    .map((e) => path.join(dir, e.name, "lock"))
    .filter((lock) => fs.existsSync(lock));
}

/** A plugin killed while queued for a lock leaves its ticket in /run: the queue goes with its lock. */
function removeLockQueue(lockPath: string): void {
  if (fs.existsSync(lockPath)) fs.rmSync(queueDirOf(fs.statSync(lockPath)), { recursive: true, force: true });
}

function pluginEnv(verb: string, att: Partial<Attachment>, extraEnv: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {
    PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
    CNI_COMMAND: verb,
    CNI_PATH,
    ...extraEnv,
  };
  if (att.containerId !== undefined) env.CNI_CONTAINERID = att.containerId;
  if (att.ifname !== undefined) env.CNI_IFNAME = att.ifname;
  if (att.netns !== undefined) env.CNI_NETNS = att.netns;
  return env;
}

function parseRun(status: number | null, stdout: string): PluginRun {
  let json: Record<string, unknown> | undefined;
  try {
    json = stdout.trim() ? (JSON.parse(stdout) as Record<string, unknown>) : undefined;
  } catch {
    json = undefined;
  }
  return { status, stdout, json };
}

const stdinOf = (conf: unknown) => (typeof conf === "string" ? conf : JSON.stringify(conf));

/** Runs the plugin from inside `node` (its host namespace), as a runtime would. */
export function runPlugin(
  node: string,
  verb: string,
  att: Partial<Attachment>,
  conf: unknown,
  extraEnv: Record<string, string> = {},
): PluginRun {
  const r = spawnSync("nsenter", [`--net=/run/netns/${node}`, pluginBinary], {
    input: stdinOf(conf),
    env: pluginEnv(verb, att, extraEnv),
    encoding: "utf8",
    timeout: 30_000,
  });
  return parseRun(r.status, r.stdout);
}

/** `runPlugin` without waiting: for concurrent invocations. */
export function runPluginAsync(
  node: string,
  verb: string,
  att: Partial<Attachment>,
  conf: unknown,
  extraEnv: Record<string, string> = {},
): Promise<PluginRun> {
  return new Promise((resolve, reject) => {
    const child = spawn("nsenter", [`--net=/run/netns/${node}`, pluginBinary], { env: pluginEnv(verb, att, extraEnv) });
    let stdout = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.on("error", reject);
    child.on("close", (status) => resolve(parseRun(status, stdout)));
    child.stdin.end(stdinOf(conf));
  });
}

/** The host device name from an ADD result (interfaces[0]). */
export const hostDev = (run: PluginRun) => ((run.json?.interfaces ?? []) as { name: string }[])[0]?.name ?? "";

/** A pod's IPv4 and IPv6 address from an ADD result, without prefix lengths. */
export function podIps(run: PluginRun): { v4: string; v6: string } {
  const ips = (run.json?.ips ?? []) as { address: string }[];
  const v4 = ips.find((i) => !i.address.includes(":"))?.address.split("/")[0] ?? "";
  const v6 = ips.find((i) => i.address.includes(":"))?.address.split("/")[0] ?? "";
  return { v4, v6 };
}

/** A veth-datapath network config with host-local IPAM keeping its state in `dataDir`. */
export function vethConf(opts: {
  bpffsRoot: string;
  cniVersion?: string;
  subnet4?: string;
  subnet6?: string;
  dataDir: string;
  logFile: string;
  extra?: Record<string, unknown>;
  rangeStart4?: string;
}): Record<string, unknown> {
  const ranges: unknown[] = [];
  if (opts.subnet4) {
    const r: Record<string, string> = { subnet: opts.subnet4 };
    if (opts.rangeStart4) {
      r.rangeStart = opts.rangeStart4;
      r.rangeEnd = opts.rangeStart4;
    }
    ranges.push([r]);
  }
  if (opts.subnet6) ranges.push([{ subnet: opts.subnet6 }]);
  return {
    cniVersion: opts.cniVersion ?? "1.1.0",
    name: "nktest",
    type: "netkit-cni",
    datapath: TEST_DATAPATH,
    logFile: opts.logFile,
    logLevel: "debug",
    ipam: { type: "host-local", ranges, dataDir: opts.dataDir },
    bpffsRoot: opts.bpffsRoot,
    hostInterface: "uplink0",
    ...opts.extra,
  };
}

/** host-local keeps one file per allocated IP in <dataDir>/<network name>/. */
export function allocatedIps(dataDir: string): string[] {
  const dir = path.join(dataDir, "nktest");
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir).filter((f) => /^[0-9a-f.:]+$/i.test(f) && (f.includes(".") || f.includes(":")));
}

/** Host-side devices the plugin made in a node netns. */
/** Polls `ok` (every 50 ms, 10 s at most) and throws naming `what` if it never holds. */
export function waitUntil(what: string, ok: () => boolean, ms = 10_000): void {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
  }
}

export function pluginLinks(node: string): string[] {
  return inNs(node, "ip", ["-o", "link", "show"])
    .split("\n")
    .map((l) => l.split(":")[1]?.trim().split("@")[0] ?? "")
    .filter((n) => n.startsWith("nk"));
}

export function ping(netns: string, address: string): boolean {
  const v6 = address.includes(":");
  return trySh("nsenter", [`--net=/run/netns/${netns}`, "ping", ...(v6 ? ["-6"] : []), "-c1", "-W2", address]).ok;
}

/** Asks the kernel directly, the way an admin would: can it make a netkit pair? */
export function kernelHasNetkit(fx: Fixture): boolean {
  const ns = fx.makeNetns("nkk");
  const args = ["link", "add", "nk0", "type", "netkit", "peer", "name", "nk1"];
  return spawnSync("nsenter", [`--net=/run/netns/${ns}`, "ip", ...args]).status === 0;
}

/** Waits for a plugin paused at a failpoint (NETKIT_CNI_PAUSE_FILE) to write its pid there. */
export async function waitForFile(file: string): Promise<number> {
  const deadline = Date.now() + 30_000;
  while (!fs.existsSync(file) || fs.readFileSync(file, "utf8").trim() === "") {
    if (Date.now() > deadline) throw new Error(`the plugin never reached ${file}`);
    await new Promise((r) => setTimeout(r, 10));
  }
  return Number(fs.readFileSync(file, "utf8").trim());
}

/** The plugin's notes about a namespace's uplinks (datapath/shaping.ts: folders named
 * after the namespace's inode, then its cookie), which outlive the namespace itself. */
function removePacingState(netns: string): void {
  const dir = "/run/netkit-cni/pacing";
  let ino: number;
  try {
    ino = fs.statSync(`/run/netns/${netns}`).ino;
  } catch {
    return;
  }
  if (!fs.existsSync(dir)) return;
  for (const name of fs.readdirSync(dir)) {
    if (name.startsWith(`${ino}-`)) fs.rmSync(path.join(dir, name), { recursive: true, force: true });
  }
}
