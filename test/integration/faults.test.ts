/**
 * An ADD killed at every step boundary (SIGKILL while paused at a named failpoint), then
 * the runtime's DEL (without a result: the ADD never returned one), then GC: nothing is
 * left — no device, route, pin, endpoint entry or IP reservation — and the address can
 * be handed out again. An ADD failing at every step, inside one too, leaves nothing by
 * its own undo, with no DEL at all; so does an IPAM plugin that allocates and then fails.
 * A DEL that comes while the ADD it follows still runs waits for it, then leaves nothing.
 * A DEL killed at its steps, inline or deferred, is completed by the runtime's next DEL.
 */
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { attachmentLockPath } from "../../src/commands/attachment-lock";
import { nodeLockPath } from "../../src/datapath/node-datapath";
import { endpointMapEntries, pinnedEndpointDevices } from "../../src/datapath/node-state";
import { queueDirOf } from "../../src/sys/file-lock";
import { CNI_PATH, Fixture, inNs, pluginLinks, runPlugin, runPluginAsync, waitForFile } from "../support/harness";
import { type ClusterNode, makeCluster } from "../support/topology";

const STEPS = ["ipam-allocated", "pair-created", "pod-configured", "host-configured", "fastpath-attached"] as const;
/** With the step inside the datapath's pair creation: the kernel has made the pair, ADD has not seen it yet. */
const ALL_STEPS = ["ipam-allocated", "pair-requested", ...STEPS.slice(1)] as const;

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

/** Both places a veth pod's programs can run: pinned tcx links, or tc filters that pin nothing. */
const POD_HOOKS = ["tcx", "tc"] as const;

describe.each(POD_HOOKS)('ADD interrupted by SIGKILL, "podHook": "%s"', (podHook) => {
  it.each(STEPS)("at %s: DEL then GC leave nothing, and the IP is reusable", async (step) => {
    conf = { ...conf, podHook };
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

describe("DEL interrupted by SIGKILL", () => {
  const cases = [
    ["inline", "del-ipam-released"],
    ["inline", "del-endpoint-removed"],
    ["deferred", "del-ipam-released"],
    ["deferred", "del-retired"],
    ["deferred", "del-endpoint-removed"],
  ] as const;
  it.each(cases)(
    "%s teardown, at %s: the runtime's next DEL frees everything, and the IP is reusable",
    async (teardown, step) => {
      const withTeardown = { ...conf, teardown };
      const pod = fx.makeNetns("nkp");
      const att = { containerId: `del-killed-${step}`, netns: `/run/netns/${pod}`, ifname: "eth0" };
      const added = runPlugin(node.netns, "ADD", att, withTeardown);
      expect(added.status, added.stdout).toBe(0);
      const withResult = { ...withTeardown, prevResult: added.json };
      const pause = path.join(dataDir, `pause-${step}`);
      const deleting = runPluginAsync(node.netns, "DEL", att, withResult, {
        NETKIT_CNI_PAUSE_AT: step,
        NETKIT_CNI_PAUSE_FILE: pause,
      });
      const pid = await waitForFile(pause);
      process.kill(pid, "SIGKILL");
      expect((await deleting).status).not.toBe(0);
      fs.rmSync(pause, { force: true });

      const del = runPlugin(node.netns, "DEL", att, withResult);
      expect(del.status, del.stdout).toBe(0);
      // What DEL frees at once is free; only a retired device waits for its netns.
      expect(pinnedEndpointDevices(node.bpffsRoot)).toEqual([]);
      expect(endpointMapEntries(node.bpffsRoot).size).toBe(0);
      expect(reservations()).toEqual([]);
      expect(inNs(node.netns, "ip", ["route"])).not.toContain("10.221.1.9");
      const left = pluginLinks(node.netns);
      if (teardown === "inline") expect(left).toEqual([]);
      else expect(inNs(node.netns, "ip", ["-o", "link", "show", ...left])).toContain("netkit-del:");

      // The next pod, in a sandbox of its own, gets the address at once.
      const next = { containerId: "after", netns: `/run/netns/${fx.makeNetns("nkp")}`, ifname: "eth0" };
      const again = runPlugin(node.netns, "ADD", next, withTeardown);
      expect(again.status, again.stdout).toBe(0);
      expect((again.json?.ips as { address: string }[] | undefined)?.[0]?.address).toBe("10.221.1.9/32");
    },
  );
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

describe("ADD failing at every step", () => {
  /**
   * What a failed ADD could leave, on the node and in the pod: devices (and the uplink's
   * qdiscs), routes and rules in every table, proxy entries, pins, endpoint entries and
   * reservations. Node-wide switches (forwarding) and programs stay by design.
   */
  function snapshot(pod: string): Record<string, unknown> {
    const state = (ns: string) => ({
      links: inNs(ns, "ip", ["-o", "link", "show"]),
      routes: inNs(ns, "ip", ["-4", "route", "show", "table", "all"]),
      // Without link-local routes: the kernel adds the first pod's own when its DAD ends,
      // whenever that is. A device left behind shows in `links`.
      routes6: inNs(ns, "ip", ["-6", "route", "show", "table", "all"])
        .split("\n")
        .filter((l) => !l.includes("fe80::"))
        .join("\n"),
      rules: inNs(ns, "ip", ["-4", "rule", "show"]),
      rules6: inNs(ns, "ip", ["-6", "rule", "show"]),
      proxies: inNs(ns, "ip", ["neigh", "show", "proxy"]),
    });
    return {
      node: state(node.netns),
      uplinkQdiscs: inNs(node.netns, "tc", ["qdisc", "show", "dev", node.wire]),
      pod: state(pod),
      pins: pinnedEndpointDevices(node.bpffsRoot).sort(),
      entries: [...endpointMapEntries(node.bpffsRoot).keys()].sort(),
      reservations: (node.conf.ipam as { dataDir: string }).dataDir,
    };
  }
  const reserved = (dataDir: string) => fs.readdirSync(path.join(dataDir, "cluster")).sort();

  // A second interface of a pod (its source rules live in the pod netns, beyond the
  // device), dual-stack, with rate limits both ways (the uplink's qdisc, a program on the
  // host device's transmit): every kind of state an ADD makes.
  it.each(POD_HOOKS.flatMap((podHook) => ALL_STEPS.map((step) => [step, podHook] as const)))(
    'at %s, "podHook": "%s": the ADD\'s own undo leaves the node and the pod as they were',
    (step, podHook) => {
      const pod = fx.makeNetns("nkp");
      const first = runPlugin(
        node.netns,
        "ADD",
        { containerId: "multi", netns: `/run/netns/${pod}`, ifname: "eth0" },
        node.conf,
      );
      expect(first.status, first.stdout).toBe(0);
      const before = snapshot(pod);
      const ipsBefore = reserved(before.reservations as string);

      const bandwidth = { ingressRate: 5e6, ingressBurst: 1e6, egressRate: 8e6, egressBurst: 1e6 };
      const failed = runPlugin(
        node.netns,
        "ADD",
        { containerId: "multi", netns: `/run/netns/${pod}`, ifname: "net1" },
        { ...node.conf, podHook, runtimeConfig: { bandwidth } },
        { NETKIT_CNI_FAIL_AT: step },
      );
      expect(failed.status).toBe(1);
      expect(String(failed.json?.msg), failed.stdout).toBe(`failure injected at ${step}`);

      expect(snapshot(pod)).toEqual(before);
      expect(reserved(before.reservations as string)).toEqual(ipsBefore);
    },
  );
});

describe("an IPAM plugin that allocates and then fails", () => {
  it("has its allocation released by the ADD's undo", () => {
    // host-local's allocation, then an answer nobody can read (as from a plugin killed
    // at its timeout, or a broken one).
    const bin = fx.tempDir("nkt-ipam-");
    fs.writeFileSync(
      path.join(bin, "flaky-ipam"),
      `#!/bin/sh\nout=$(${CNI_PATH}/host-local); status=$?\n` +
        `if [ $status = 0 ] && [ "$CNI_COMMAND" = ADD ]; then echo "not a result"; exit 0; fi\n` +
        `printf '%s' "$out"; exit $status\n`,
      { mode: 0o755 },
    );
    const flaky = { ...conf, ipam: { ...(conf.ipam as object), type: "flaky-ipam" } };
    const pod = fx.makeNetns("nkp");
    const att = { containerId: "flaky", netns: `/run/netns/${pod}`, ifname: "eth0" };
    const r = runPlugin(node.netns, "ADD", att, flaky, { CNI_PATH: `${bin}:${CNI_PATH}` });
    expect(r.status).toBe(1);
    expect(String(r.json?.msg), r.stdout).toBe("ipam plugin flaky-ipam ADD printed a result that is not JSON");
    expect(reservations()).toEqual([]);
    expect(pluginLinks(node.netns)).toEqual([]);
  });
});

describe("a DEL while the ADD it follows still runs", () => {
  // A runtime that gave up on an ADD sends a DEL, and the ADD may not be dead. Paused at
  // every step (the device made but not yet labelled as ours among them), the ADD ends
  // first, whole, and the DEL then removes all of it.
  it.each(ALL_STEPS)("ADD paused at %s: the DEL waits for it to end, then leaves nothing", async (step) => {
    const pod = fx.makeNetns("nkp");
    const att = { containerId: `raced-${step}`, netns: `/run/netns/${pod}`, ifname: "eth0" };
    // A new namespace's own links (lo, and on some kernels fallback tunnels such as sit0).
    const podLinks = () => inNs(pod, "ip", ["-o", "link", "show"]).trim().split("\n");
    const fresh = podLinks();
    const pause = path.join(dataDir, `pause-${step}`);
    const adding = runPluginAsync(node.netns, "ADD", att, conf, {
      NETKIT_CNI_PAUSE_AT: step,
      NETKIT_CNI_PAUSE_FILE: pause,
    });
    await waitForFile(pause);
    let deleted = false;
    const deleting = runPluginAsync(node.netns, "DEL", att, conf).then((r) => {
      deleted = true;
      return r;
    });
    // The DEL either queues behind the ADD for the attachment's lock, or (were nothing to
    // stop it) runs to its end while the ADD is paused.
    const lock = attachmentLockPath(att.containerId, att.ifname);
    const queued = () => {
      try {
        return fs.readdirSync(queueDirOf(fs.statSync(lock))).length > 0;
      } catch {
        return false; // no lock file, or no queue
      }
    };
    const deadline = Date.now() + 30_000;
    while (!deleted && !queued() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(deleted).toBe(false);
    expect(queued()).toBe(true);
    fs.rmSync(pause);
    const [add, del] = await Promise.all([adding, deleting]);
    expect(add.status, add.stdout).toBe(0);
    expect(del.status, del.stdout).toBe(0);

    expect(pluginLinks(node.netns)).toEqual([]);
    expect(podLinks()).toEqual(fresh);
    expect(inNs(node.netns, "ip", ["route"])).not.toContain("10.221.1.9");
    expect(pinnedEndpointDevices(node.bpffsRoot)).toEqual([]);
    expect(endpointMapEntries(node.bpffsRoot).size).toBe(0);
    expect(reservations()).toEqual([]);
    const again = runPlugin(node.netns, "ADD", { ...att, containerId: "after" }, conf);
    expect((again.json?.ips as { address: string }[] | undefined)?.[0]?.address, again.stdout).toBe("10.221.1.9/32");
  });
});
