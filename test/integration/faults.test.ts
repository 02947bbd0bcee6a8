/**
 * An ADD killed at every step boundary (SIGKILL while paused at a named failpoint), then
 * the runtime's DEL (without a result: the ADD never returned one), then GC: nothing is
 * left — no device, route, pin, endpoint entry or IP reservation — and the address can
 * be handed out again.
 */
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { endpointMapEntries, nodeLockPath, pinnedEndpointDevices } from "../../src/datapath/fastpath";
import { Fixture, inNs, pluginLinks, runPlugin, runPluginAsync, waitForFile } from "./harness";
import { type ClusterNode, makeCluster } from "./topology";

const STEPS = ["ipam-allocated", "pair-created", "pod-configured", "host-configured", "fastpath-attached"] as const;

let fx: Fixture;
let node: ClusterNode;
let conf: Record<string, unknown>;
let dataDir: string;

beforeEach(() => {
  fx = new Fixture();
  [node] = makeCluster(fx);
  dataDir = fx.tempDir("nkt-fault-");
  // One address only: "the IP is reusable" then means exactly that address comes back.
  conf = {
    ...node.conf,
    ipam: {
      type: "netkit-cni",
      ranges: [[{ subnet: "10.221.1.0/24", rangeStart: "10.221.1.9", rangeEnd: "10.221.1.9" }]],
      dataDir,
    },
  };
});
afterEach(() => fx.cleanup());

const reservations = () => {
  const dir = path.join(dataDir, "cluster");
  return fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => /^\d+\.\d+\.\d+\.\d+$/.test(f)) : [];
};

describe("ADD interrupted by SIGKILL", () => {
  it.each(STEPS)("at %s: DEL then GC leave nothing, and the IP is reusable", async (step) => {
    const pod = fx.makeNetns("nkp");
    const att = { containerId: `killed-${step}`, netns: `/run/netns/${pod}`, ifname: "eth0" };
    const pause = path.join(dataDir, `pause-${step}`);
    const adding = runPluginAsync(node.netns, "ADD", att, conf, {
      NETKIT_CNI_PAUSE_AT: step,
      NETKIT_CNI_PAUSE_FILE: pause,
    });
    const pid = await waitForFile(pause);
    process.kill(pid, "SIGKILL");
    expect((await adding).status).not.toBe(0);
    fs.rmSync(pause, { force: true });

    const del = runPlugin(node.netns, "DEL", att, conf);
    expect(del.status, del.stdout).toBe(0);
    const gc = runPlugin(node.netns, "GC", {}, { ...conf, "cni.dev/valid-attachments": [] });
    expect(gc.status, gc.stdout).toBe(0);

    expect(pluginLinks(node.netns)).toEqual([]);
    expect(inNs(node.netns, "ip", ["route"])).not.toContain("10.221.1.9");
    expect(pinnedEndpointDevices(node.bpffsRoot)).toEqual([]);
    expect(endpointMapEntries(node.bpffsRoot).size).toBe(0);
    expect(reservations()).toEqual([]);

    const again = runPlugin(node.netns, "ADD", { ...att, containerId: "after" }, conf);
    expect(again.status, again.stdout).toBe(0);
    expect((again.json?.ips as { address: string }[] | undefined)?.[0]?.address).toBe("10.221.1.9/32");
  });
});

describe("a node lock held by a stuck process", () => {
  it("fails ADD with code 11 (try again later) after the timeout, leaving nothing", async () => {
    fs.mkdirSync("/run/netkit-cni", { recursive: true, mode: 0o700 });
    const holder = spawn("flock", [nodeLockPath(node.bpffsRoot), "sleep", "30"], { stdio: "ignore" });
    fx.processes.push({ kill: () => holder.kill("SIGKILL") });
    await new Promise((r) => setTimeout(r, 300)); // let flock take it
    const pod = fx.makeNetns("nkp");
    const started = Date.now();
    const r = await runPluginAsync(
      node.netns,
      "ADD",
      { containerId: "locked", netns: `/run/netns/${pod}`, ifname: "eth0" },
      conf,
    );
    const waited = Date.now() - started;
    expect(r.json, r.stdout).toMatchObject({ code: 11 });
    expect(String(r.json?.msg)).toMatch(/node datapath is busy: timed out after 10000 ms waiting for the lock/);
    expect(waited).toBeGreaterThanOrEqual(10_000);
    expect(pluginLinks(node.netns)).toEqual([]);
    expect(reservations()).toEqual([]);
  }, 60_000);
});
