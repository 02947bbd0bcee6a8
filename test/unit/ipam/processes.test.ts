/**
 * The store's lock against other processes: a holder makes us wait and then answer "try
 * again later" (code 11); several processes allocating at once never share an address.
 * The child processes run the real module, bundled by esbuild into a temp file.
 */
import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { buildSync } from "esbuild";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ErrorCode } from "../../../src/cni/errors";
import { allocate } from "../../../src/ipam/index";
import { addressesOf, cleanupDirs, cniErrorOf, config, listAllocations, NETWORK, tempDataDir } from "./helpers";

let bundleDir = "";
let worker = "";
const children: ChildProcess[] = [];

beforeAll(() => {
  bundleDir = fs.mkdtempSync(path.join(os.tmpdir(), "netkit-ipam-worker-"));
  worker = path.join(bundleDir, "worker.js");
  buildSync({
    entryPoints: [path.join(__dirname, "ipam-worker-entry.ts")],
    bundle: true,
    platform: "node",
    external: ["ffi-rs", "bun:ffi"],
    outfile: worker,
    logLevel: "error",
  });
});

afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill("SIGKILL");
  cleanupDirs();
});

afterAll(() => fs.rmSync(bundleDir, { recursive: true, force: true }));

/** Holds the store's lock from a shell (util-linux flock) for `seconds`; resolves once held. */
function holdLock(lockPath: string, seconds: number): Promise<ChildProcess> {
  // `exec sleep` keeps the locked descriptor in the process we spawned, so killing it frees the lock.
  const child = spawn("sh", ["-c", `exec 9<"$1"; flock 9; echo locked; exec sleep ${seconds}`, "sh", lockPath], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  children.push(child);
  return new Promise((resolve, reject) => {
    child.stdout?.on("data", (d: Buffer) => {
      if (d.toString().includes("locked")) resolve(child);
    });
    child.on("exit", (code) => reject(new Error(`lock holder exited with ${code}`)));
  });
}

const exited = (child: ChildProcess) =>
  new Promise<void>((resolve) => (child.exitCode !== null ? resolve() : child.on("exit", () => resolve())));

function runWorker(ipam: Record<string, unknown>, prefix: string, count: number): Promise<unknown> {
  const child = spawn(
    process.execPath,
    [worker, JSON.stringify({ type: "netkit-cni", ...ipam }), NETWORK, prefix, String(count), "20000"],
    {
      stdio: ["ignore", "pipe", "inherit"],
      // The bundle lives in a temp dir; ffi-rs (external) comes from the project's node_modules.
      env: { ...process.env, NODE_PATH: path.resolve(__dirname, "../../../node_modules") },
    },
  );
  children.push(child);
  let out = "";
  child.stdout?.on("data", (d: Buffer) => {
    out += d.toString();
  });
  return new Promise((resolve, reject) =>
    child.on("exit", (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`worker: ${code} ${out}`)))),
  );
}

describe("the store lock", () => {
  it("times out with code 11 naming the lock while another process holds it", async () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.1.0.0/24" }]] }, 300);
    allocate(cfg, "first", "eth0"); // creates the store and its lock file
    const lockPath = path.join(dataDir, NETWORK, "lock");
    const holder = await holdLock(lockPath, 30);

    const started = Date.now();
    const err = cniErrorOf(() => allocate(cfg, "second", "eth0"));
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    expect(err.code).toBe(ErrorCode.TryAgainLater);
    expect(err.message).toBe(
      `IPAM store is busy: timed out after 300 ms waiting for the lock ${lockPath}; try again later`,
    );
    holder.kill("SIGKILL");
    await exited(holder);
    expect(addressesOf(allocate(cfg, "second", "eth0").ips)).toEqual(["10.1.0.3"]);
  });

  it("waits for a holder that lets go within the timeout", async () => {
    const dataDir = tempDataDir();
    const cfg = config({ dataDir, ranges: [[{ subnet: "10.1.0.0/24" }]] }, 5_000);
    allocate(cfg, "first", "eth0");
    await holdLock(path.join(dataDir, NETWORK, "lock"), 0.4);
    const started = Date.now();
    expect(addressesOf(allocate(cfg, "second", "eth0").ips)).toEqual(["10.1.0.3"]);
    expect(Date.now() - started).toBeGreaterThanOrEqual(200);
  });
});

describe("concurrent allocation", () => {
  it("8 processes allocating 10 dual-stack attachments each never hand out an address twice", async () => {
    const dataDir = tempDataDir();
    const ipam = { dataDir, ranges: [[{ subnet: "10.1.0.0/24" }], [{ subnet: "fd00::/64" }]] };
    const outputs = await Promise.all(Array.from({ length: 8 }, (_, p) => runWorker(ipam, `proc${p}`, 10)));
    const all = (outputs as string[][]).flat();
    expect(all).toHaveLength(160);
    expect(new Set(all).size).toBe(160);

    const stored = listAllocations(config(ipam));
    expect(stored).toHaveLength(160);
    for (const [p, ips] of (outputs as string[][]).entries()) {
      for (const [n, cidr] of ips.entries()) {
        const ip = cidr.split("/")[0];
        // Each process allocates two addresses (v4, v6) per attachment, in order.
        const owner = stored.find((a) => a.ip === ip);
        expect(owner).toEqual({ ip, containerId: `proc${p}-${Math.floor(n / 2)}`, ifname: "eth0" });
      }
    }
    // Round robin handed out one contiguous block per family.
    const v4 = stored.filter((a) => !a.ip.includes(":")).map((a) => a.ip);
    expect(v4[0]).toBe("10.1.0.2");
    expect(v4[79]).toBe("10.1.0.81");
    expect(fs.readdirSync(path.join(dataDir, NETWORK)).filter((n) => n.startsWith("."))).toEqual([]);
  }, 60_000);
});
