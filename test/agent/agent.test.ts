/**
 * The built `netkit-cni agent` in a node's network namespace against the stand-in API
 * server (the real @kubernetes/client-node inside the executable): the conflist from the
 * node's pod CIDRs, routes to every other node's pod CIDRs via its InternalIP (proto 235)
 * replaced and removed as the nodes change, nodes it cannot route reported, routes of
 * others never touched, malformed nodes skipped, masquerade in a table of its own, STATUS
 * held at code 50 until the first sync, SIGTERM leaving everything in place, a restart
 * cleaning up after nodes deleted meanwhile, and its HTTP endpoints.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { hostDeviceName } from "../../src/datapath/naming";
import { useStandInApi } from "../support/fixtures";
import { type Fixture, inNs, podIps, runPlugin, runPluginAsync, waitForFile } from "../support/harness";
import type { StandInApiServer } from "../support/kube-apiserver";
import { AgentProcess, agentNode, agentRoutes, eventually, makeNode, readJson, scrape } from "./agent-harness";

const CLUSTER = ["10.40.0.0/16", "fd40::/48"];
const SELF = "node-a";
/** The DaemonSet's ConfigMap, for this cluster. */
const CONFIG = { "cluster-cidr": CLUSTER.join(",") };

function statusVerb(netns: string, conflistFile: string) {
  const conflist = readJson(conflistFile);
  return runPlugin(netns, "STATUS", {}, { ...conflist.plugins[0], cniVersion: "1.1.0", name: conflist.name });
}

/**
 * What an ADD result says of a pod apart from what differs between any two pods (addresses,
 * MACs, names, the sandbox): the interfaces' count, the address families and gateways, the
 * routes, DNS.
 */
function shapeOf(result: Record<string, unknown> | undefined) {
  const r = result as {
    interfaces: unknown[];
    ips: { address: string; gateway?: string }[];
    routes?: unknown[];
    dns?: unknown;
  };
  return {
    interfaces: r.interfaces.length,
    ips: r.ips.map((ip) => ({ family: ip.address.includes(":") ? 6 : 4, gateway: ip.gateway })),
    routes: r.routes,
    dns: r.dns,
  };
}

describe("netkit-cni agent", () => {
  let fx: Fixture;
  let api: StandInApiServer;
  useStandInApi((standIn) => {
    ({ fx, api } = standIn);
  });

  const agentArgs = (extra: string[] = []) => [
    "--host-interface",
    "uplink0",
    "--bpffs-root",
    fx.bpffsRoot,
    "--data-dir",
    fx.tempDir("nkt-ipam-"),
    "--resync-seconds",
    "1",
    ...extra,
  ];

  it("routes other nodes' pod CIDRs via their InternalIPs, follows changes, reports and skips what it cannot route", async () => {
    const netns = makeNode(fx, "nkag");
    const node = agentNode(fx, api, netns, SELF);
    // Someone else's routes: one to a peer's pod CIDR, one elsewhere.
    inNs(netns, "ip", ["route", "add", "10.40.9.0/24", "via", "10.30.0.9"]);
    inNs(netns, "ip", ["route", "add", "192.0.2.0/24", "via", "10.30.0.99"]);
    api.addNode({ name: SELF, podCIDRs: ["10.40.1.0/24", "fd40:0:0:1::/64"], internalIPs: ["10.30.0.1", "fd30::1"] });
    api.addNode({
      name: "node-b",
      podCIDRs: ["10.40.2.0/24", "fd40:0:0:2::/64"],
      internalIPs: ["10.30.0.2", "fd30::2"],
    });
    api.addNode({ name: "node-c", podCIDRs: ["10.40.3.0/24"], internalIPs: ["10.30.0.3"] });
    api.addNode({ name: "far", podCIDRs: ["10.40.4.0/24"], internalIPs: ["198.51.100.4"] }); // not on a link
    api.addNode({ name: "theirs", podCIDRs: ["10.40.9.0/24"], internalIPs: ["10.30.0.9"] });
    api.addNode({ name: "overlap", podCIDRs: ["10.40.1.128/25"], internalIPs: ["10.30.0.5"] });
    api.addNode({ name: "bad", podCIDRs: ["10.40.6.1/24", "nonsense"], internalIPs: ["10.30.0.300", "10.30.0.6"] });
    api.addNode({ name: "bad-types", extra: { spec: { podCIDRs: 7 }, status: { addresses: "x" } } });
    // Outside --cluster-cidr: its pods' traffic would leave unmasqueraded, never answered.
    api.addNode({ name: "astray", podCIDRs: ["10.41.1.0/24"], internalIPs: ["10.30.0.7"] });

    const agent = AgentProcess.start(fx, node, agentArgs(["--skip-binary"]), CONFIG);
    const expected = ["10.40.2.0/24 via 10.30.0.2", "10.40.3.0/24 via 10.30.0.3", "fd40:0:0:2::/64 via fd30::2"];
    // The routes and the conflist come from two controllers, in either order.
    const conflistFile = path.join(node.confDir, "10-netkit-cni.conflist");
    await eventually(
      "the routes and the conflist",
      () => agentRoutes(netns).join() === expected.join() && fs.existsSync(conflistFile),
      20_000,
      () => agent.log,
    );

    // The conflist, as install writes it, for this node's CIDRs and naming the agent's state.
    const conflist = readJson(conflistFile);
    expect(conflist.plugins[0]).toMatchObject({
      type: "netkit-cni",
      clusterCIDRs: CLUSTER,
      agentStateDir: node.stateDir,
      ipam: { ranges: [[{ subnet: "10.40.1.0/24" }], [{ subnet: "fd40:0:0:1::/64" }]] },
    });
    expect(fs.existsSync(path.join(node.binDir, "netkit-cni"))).toBe(false); // --skip-binary

    // Reported, not routed: the far node (no default-gateway detour), the overlap, the taken destination.
    const status = JSON.parse(scrape(node, "/status")[1]);
    const peer = (n: string) => status.peers.find((p: { node: string }) => p.node === n);
    expect(peer("far")).toMatchObject({ state: "unreachable" });
    expect(peer("far").why.join()).toContain("198.51.100.4 is not on a link");
    expect(peer("overlap")).toMatchObject({ state: "conflict" });
    expect(peer("bad").why).toEqual(
      expect.arrayContaining([expect.stringContaining("nonsense"), expect.stringContaining("10.30.0.300")]),
    );
    expect(peer("theirs")).toMatchObject({ state: "conflict" });
    expect(peer("theirs").why.join()).toContain("route to 10.40.9.0/24 not made");
    expect(peer("astray")).toMatchObject({
      state: "outside-cluster",
      why: ["pod CIDR 10.41.1.0/24 lies outside the cluster CIDRs (--cluster-cidr)"],
    });
    await eventually(
      "the log",
      () => /node theirs not routed \(conflict\)/.test(agent.log) && /skipped: node bad-types/.test(agent.log),
    );
    // Theirs untouched.
    const main = inNs(netns, "ip", ["route", "show"]);
    expect(main).toMatch(/10\.40\.9\.0\/24 via 10\.30\.0\.9 dev uplink0/);
    expect(main).toMatch(/192\.0\.2\.0\/24 via 10\.30\.0\.99 dev uplink0/);
    expect(main).not.toMatch(/10\.40\.4\.0/);
    expect(main).not.toMatch(/10\.41\.1\.0/);

    // node-b moves, node-c goes, bad gets fixed: replaced, removed, added.
    api.updateNode("node-b", (n) => {
      (n.status as { addresses: unknown[] }).addresses = [{ type: "InternalIP", address: "10.30.0.22" }];
    });
    api.deleteNode("node-c");
    api.updateNode("bad", (n) => {
      (n.spec as Record<string, unknown>).podCIDRs = ["10.40.6.0/24"];
    });
    const next = ["10.40.2.0/24 via 10.30.0.22", "10.40.6.0/24 via 10.30.0.6"];
    await eventually(
      "the changed routes",
      () => agentRoutes(netns).join() === next.join(),
      20_000,
      () => agent.log,
    );

    // A route of ours removed by hand comes back at the next resync.
    inNs(netns, "ip", ["route", "del", "10.40.6.0/24"]);
    await eventually(
      "the route back",
      () => agentRoutes(netns).join() === next.join(),
      20_000,
      () => agent.log,
    );
    expect(await agent.kill("SIGTERM")).toBe(0);
    // Nothing but the agent's own lines: no runtime warnings (a library's deprecation).
    expect(agent.log.split("\n").filter((l) => l && !/^\d{4}-\d\d-\d\dT\S+ (info|warn|error) /.test(l))).toEqual([]);
  });

  it("holds STATUS at code 50 until synced; SIGTERM leaves routes, masquerade and conflist; a restart cleans up", async () => {
    const netns = makeNode(fx, "nkag");
    const node = agentNode(fx, api, netns, SELF);
    api.addNode({ name: SELF, internalIPs: ["10.30.0.1"] }); // no pod CIDR yet
    api.addNode({ name: "node-b", podCIDRs: ["10.40.2.0/24"], internalIPs: ["10.30.0.2"] });
    api.addNode({ name: "node-c", podCIDRs: ["10.40.3.0/24"], internalIPs: ["10.30.0.3"] });

    const first = AgentProcess.start(fx, node, agentArgs(), CONFIG);
    await eventually(
      "waiting for the pod CIDR",
      () => first.log.includes("has no spec.podCIDRs yet"),
      20_000,
      () => first.log,
    );
    expect(fs.existsSync(node.confDir) && fs.readdirSync(node.confDir).length > 0).toBe(false);
    expect(scrape(node, "/readyz")[0]).toBe(503);

    api.updateNode(SELF, (n) => {
      n.spec = { podCIDR: "10.40.1.0/24", podCIDRs: ["10.40.1.0/24"] };
    });
    const conflistFile = path.join(node.confDir, "10-netkit-cni.conflist");
    await eventually(
      "synced",
      () => scrape(node, "/readyz")[0] === 200,
      20_000,
      () => first.log,
    );
    expect(agentRoutes(netns)).toEqual(["10.40.2.0/24 via 10.30.0.2", "10.40.3.0/24 via 10.30.0.3"]);
    expect(statusVerb(netns, conflistFile).status).toBe(0);
    // The executable went into the bin dir too (once).
    expect(fs.statSync(path.join(node.binDir, "netkit-cni")).mode & 0o111).not.toBe(0);
    const table = inNs(netns, "nft", ["list", "table", "inet", "netkit-cni-agent"]);
    expect(table).toMatch(/ip saddr @pods4 ip daddr != @direct4 masquerade/);
    expect(table).toMatch(/ip6 saddr @pods6 ip6 daddr != @direct6 masquerade/);

    // SIGTERM: everything stays for the next agent (pods keep working through an update).
    expect(await first.kill("SIGTERM")).toBe(0);
    expect(agentRoutes(netns)).toEqual(["10.40.2.0/24 via 10.30.0.2", "10.40.3.0/24 via 10.30.0.3"]);
    expect(inNs(netns, "nft", ["list", "tables"])).toContain("netkit-cni-agent");
    expect(fs.existsSync(conflistFile)).toBe(true);

    // The node reboots (/run is empty: not synced), node-c is deleted meanwhile, and the API
    // is down when the agent starts: STATUS says why it is not ready.
    fs.rmSync(path.join(node.stateDir, "synced"));
    api.deleteNode("node-c");
    await api.down();
    const notSynced = statusVerb(netns, conflistFile);
    expect(notSynced.status).toBe(1);
    expect(notSynced.json).toMatchObject({ code: 50, msg: expect.stringContaining("agent not synced") });
    const second = AgentProcess.start(fx, node, agentArgs(), CONFIG);
    await eventually(
      "an API failure",
      () => /API: .*retrying/.test(second.log),
      20_000,
      () => second.log,
    );
    expect(statusVerb(netns, conflistFile).json).toMatchObject({ code: 50 });
    await api.up();
    await eventually(
      "synced again",
      () => scrape(node, "/readyz")[0] === 200,
      30_000,
      () => second.log,
    );
    expect(agentRoutes(netns)).toEqual(["10.40.2.0/24 via 10.30.0.2"]);
    expect(statusVerb(netns, conflistFile).status).toBe(0);

    // --masquerade=false: the table is someone else's job now.
    expect(await second.kill("SIGTERM")).toBe(0);
    const third = AgentProcess.start(fx, node, agentArgs(), { ...CONFIG, masquerade: "false" });
    await eventually(
      "no table",
      () => !inNs(netns, "nft", ["list", "tables"]).includes("netkit-cni-agent"),
      20_000,
      () => third.log,
    );
    expect(await third.kill("SIGTERM")).toBe(0);
  }, 180_000);

  it("a restarted agent keeps every route while it lists the nodes again (none removed, then added back)", async () => {
    const netns = makeNode(fx, "nkag");
    const node = agentNode(fx, api, netns, SELF);
    api.addNode({ name: SELF, podCIDRs: ["10.40.1.0/24"], internalIPs: ["10.30.0.1"] });
    const N = 120;
    for (let i = 2; i < N + 2; i++) {
      api.addNode({ name: `peer-${i}`, podCIDRs: [`10.40.${i}.0/24`], internalIPs: [`10.30.0.${i}`] });
    }
    const first = AgentProcess.start(fx, node, agentArgs(["--skip-binary"]), CONFIG);
    await eventually(
      "all routes",
      () => agentRoutes(netns).length === N,
      30_000,
      () => first.log,
    );
    expect(await first.kill("SIGTERM")).toBe(0);

    const second = AgentProcess.start(fx, node, agentArgs(["--skip-binary"]), CONFIG);
    let fewest = N;
    await eventually(
      "synced",
      () => {
        fewest = Math.min(fewest, agentRoutes(netns).length);
        return second.log.includes("synced:");
      },
      30_000,
      () => second.log,
    );
    expect(fewest).toBe(N);
    expect(await second.kill("SIGTERM")).toBe(0);
  }, 120_000);

  it("serves /healthz, /readyz and Prometheus metrics, with the plugin's verb timings", async () => {
    const netns = makeNode(fx, "nkag");
    const node = agentNode(fx, api, netns, SELF);
    api.addNode({ name: SELF, podCIDRs: ["10.40.1.0/24"], internalIPs: ["10.30.0.1"] });
    api.addNode({ name: "node-b", podCIDRs: ["10.40.2.0/24"], internalIPs: ["10.30.0.2"] });
    api.addNode({ name: "far", podCIDRs: ["10.40.4.0/24"], internalIPs: ["198.51.100.4"] });
    const agent = AgentProcess.start(fx, node, agentArgs(["--skip-binary"]), CONFIG);
    await eventually(
      "synced",
      () => scrape(node, "/readyz")[0] === 200,
      20_000,
      () => agent.log,
    );
    expect(scrape(node, "/healthz")).toEqual([200, "ok\n"]);

    // Two STATUS verbs through the agent's conflist leave their timings.
    const conflistFile = path.join(node.confDir, "10-netkit-cni.conflist");
    expect(statusVerb(netns, conflistFile).status).toBe(0);
    expect(statusVerb(netns, conflistFile).status).toBe(0);
    const [code, text] = scrape(node, "/metrics");
    expect(code).toBe(200);
    expect(text).toMatch(/^netkit_cni_agent_routes\{family="ipv4"\} 1$/m);
    expect(text).toMatch(/^netkit_cni_agent_peers\{state="routed"\} 1$/m);
    expect(text).toMatch(/^netkit_cni_agent_peers\{state="unreachable"\} 1$/m);
    expect(text).toMatch(/^netkit_cni_agent_synced 1$/m);
    expect(text).toMatch(/^netkit_cni_verb_duration_seconds_count\{verb="STATUS",result="ok"\} 2$/m);
    expect(text).toMatch(/^netkit_cni_agent_sync_errors_total 0$|# TYPE netkit_cni_agent_sync_errors_total counter/m);
    expect(scrape(node, "/nothing")[0]).toBe(404);
    expect(await agent.kill("SIGTERM")).toBe(0);
  });

  it("writes a deferred teardown into its conflist and deletes the pairs such a DEL retired whose netns lives on, and no live pod's", async () => {
    const netns = makeNode(fx, "nkag");
    const node = agentNode(fx, api, netns, SELF);
    api.addNode({ name: SELF, podCIDRs: ["10.40.1.0/24"], internalIPs: ["10.30.0.1"] });
    const agent = AgentProcess.start(fx, node, agentArgs(["--skip-binary"]), CONFIG);
    await eventually(
      "synced",
      () => scrape(node, "/readyz")[0] === 200,
      20_000,
      () => agent.log,
    );
    const conflist = readJson(path.join(node.confDir, "10-netkit-cni.conflist"));
    // The agent's conflist asks for it: the agent deletes what such a DEL leaves.
    expect(conflist.plugins[0].teardown).toBe("deferred");
    const conf = { ...conflist.plugins[0], cniVersion: "1.1.0", name: conflist.name };
    const pod = (id: string) => ({ containerId: id, netns: `/run/netns/${fx.makeNetns("nkp")}`, ifname: "eth0" });
    const [gone, live] = [pod("gone"), pod("live")];
    const added = runPlugin(netns, "ADD", gone, conf);
    expect(added.status, added.stdout).toBe(0);
    expect(runPlugin(netns, "ADD", live, conf).status).toBe(0);
    const retired = hostDeviceName("gone", "eth0");
    expect(runPlugin(netns, "DEL", gone, { ...conf, prevResult: added.json }).status).toBe(0);
    expect(inNs(netns, "ip", ["-o", "link", "show", "dev", retired])).toContain("netkit-del:");

    await eventually(
      "the retired pair deleted",
      () => !inNs(netns, "ip", ["-o", "link"]).includes(retired),
      15_000,
      () => agent.log,
    );
    expect(inNs(netns, "ip", ["-o", "link"])).toContain(hostDeviceName("live", "eth0"));
    expect(inNs(gone.netns.replace("/run/netns/", ""), "ip", ["-o", "link"])).not.toContain("eth0");
    expect(scrape(node, "/metrics")[1]).toMatch(/^netkit_cni_agent_retired_devices_deleted_total 1$/m);
    expect(await agent.kill("SIGTERM")).toBe(0);
  });

  describe("--serve-verbs", () => {
    /**
     * A node whose agent does the plugin's verbs, and the agent's conflist for a runtime's
     * verbs. The IPAM store and the plugin's log are where the DaemonSet's container sees
     * them at the plugin's paths (on a node: /var/lib/cni/networks and /var/log, mounted).
     */
    async function verbAgent(envOf: (run: string) => Record<string, string> = () => ({})) {
      const netns = makeNode(fx, "nkag");
      const node = agentNode(fx, api, netns, SELF);
      api.addNode({ name: SELF, podCIDRs: ["10.40.1.0/24"], internalIPs: ["10.30.0.1"] });
      const run = path.dirname(node.stateDir);
      const ipam = path.join(run, "ipam");
      const args = ["--host-interface", "uplink0", "--bpffs-root", fx.bpffsRoot, "--resync-seconds", "1"];
      args.push("--skip-binary", "--serve-verbs", "--data-dir", ipam, "--log-file", `${run}/plugin.log`);
      const agent = AgentProcess.start(fx, node, args, CONFIG, envOf(run));
      await eventually(
        "synced",
        () => scrape(node, "/readyz")[0] === 200,
        20_000,
        () => agent.log,
      );
      const conflist = readJson(path.join(node.confDir, "10-netkit-cni.conflist"));
      const conf = { ...conflist.plugins[0], cniVersion: "1.1.0", name: conflist.name };
      const handed = (verb: string, outcome: string) => {
        const m = new RegExp(
          `^netkit_cni_agent_handed_verbs_total\\{verb="${verb}",outcome="${outcome}"\\} (\\d+)$`,
          "m",
        );
        return Number(m.exec(scrape(node, "/metrics")[1])?.[1] ?? 0);
      };
      const reserved = () =>
        fs.existsSync(path.join(ipam, conflist.name)) ? fs.readdirSync(path.join(ipam, conflist.name)) : [];
      return { netns, node, run, agent, conf, handed, reserved };
    }
    const pod = (id: string) => ({ containerId: id, netns: `/run/netns/${fx.makeNetns("nkp")}`, ifname: "eth0" });

    it("does ADD, CHECK and DEL on its socket, the same pod as the plugin's own, which it does when the agent declines or is gone", async () => {
      const { netns, node, agent, conf, handed } = await verbAgent();
      // Only root may hand the agent a verb.
      expect(fs.statSync(path.join(node.stateDir, "verbs.sock")).mode & 0o777).toBe(0o600);

      const served = pod("served");
      const addServed = runPlugin(netns, "ADD", served, conf);
      expect(addServed.status, addServed.stdout).toBe(0);
      expect(handed("ADD", "ok")).toBe(1);
      expect(runPlugin(netns, "CHECK", served, { ...conf, prevResult: addServed.json }).status).toBe(0);
      expect(handed("CHECK", "ok")).toBe(1);
      // An error is the plugin's own error, from the agent: the same code and text.
      const missing = runPlugin(
        netns,
        "ADD",
        { ...served, ifname: "eth1", netns: "/run/netns/nkt-no-such-netns" },
        conf,
      );
      expect(missing.status).toBe(1);
      expect(missing.json?.msg).toMatch(/nkt-no-such-netns/);

      // A netns the agent does not see at that path (here a bind mount outside /run/netns;
      // on a node, a /proc/<pid>/ns/net without hostPID): declined, done by the plugin.
      const hiddenDir = fx.tempDir("nkt-hidden-");
      const hidden = { ...pod("hidden"), netns: path.join(hiddenDir, "ns") };
      fs.writeFileSync(hidden.netns, "");
      spawnSync("mount", ["--bind", pod("x").netns, hidden.netns]);
      try {
        const addHidden = runPlugin(netns, "ADD", hidden, conf);
        expect(addHidden.status, addHidden.stdout).toBe(0);
        expect(handed("", "declined")).toBe(1);
        expect(handed("ADD", "ok")).toBe(1);
        expect(runPlugin(netns, "DEL", hidden, { ...conf, prevResult: addHidden.json }).status).toBe(0);
      } finally {
        spawnSync("umount", [hidden.netns]);
      }

      // The agent gone (its socket with it): the plugin does the verb, the same pod.
      expect(await agent.kill("SIGTERM")).toBe(0);
      expect(fs.existsSync(path.join(node.stateDir, "verbs.sock"))).toBe(false);
      const own = pod("own");
      const addOwn = runPlugin(netns, "ADD", own, conf);
      expect(addOwn.status, addOwn.stdout).toBe(0);
      expect(shapeOf(addOwn.json)).toEqual(shapeOf(addServed.json));
      for (const [from, to] of [
        [served, addOwn],
        [own, addServed],
      ] as const) {
        for (const ip of Object.values(podIps(to)).filter((a) => a !== "")) {
          const pinged = spawnSync("ip", ["netns", "exec", path.basename(from.netns), "ping", "-c1", "-W2", ip]);
          expect(pinged.status, `${from.containerId} to ${ip}`).toBe(0);
        }
      }
      expect(runPlugin(netns, "DEL", served, { ...conf, prevResult: addServed.json }).status).toBe(0);
      expect(runPlugin(netns, "DEL", own, { ...conf, prevResult: addOwn.json }).status).toBe(0);
    });

    // The agent killed in the middle of a verb it does: the plugin says code 11, and the
    // runtime's DEL (done by the plugin: no agent) leaves nothing, the address free again.
    it.each(["ipam-allocated", "pair-created", "fastpath-attached", "del-retired"])(
      "killed (SIGKILL) at %s: the plugin reports code 11, the runtime's DEL leaves nothing",
      async (step) => {
        const { netns, run, agent, conf, reserved } = await verbAgent((dir) => ({
          NETKIT_CNI_PAUSE_AT: step,
          NETKIT_CNI_PAUSE_FILE: `${dir}/paused`,
        }));
        const victim = pod("victim");
        const deleting = step.startsWith("del-");
        let added: ReturnType<typeof runPlugin> | undefined;
        if (deleting) {
          // Added by the plugin itself (a failpoint in the plugin's own environment keeps
          // the verb there), so that the agent's pause comes in the DEL.
          added = runPlugin(netns, "ADD", victim, conf, { NETKIT_CNI_PAUSE_AT: "none" });
          expect(added.status, added.stdout).toBe(0);
        }
        const verb = deleting ? "DEL" : "ADD";
        const pending = runPluginAsync(netns, verb, victim, { ...conf, prevResult: added?.json });
        await waitForFile(`${run}/paused`);
        await agent.kill("SIGKILL");
        const answered = await pending;
        expect(answered.status).toBe(1);
        expect(answered.json).toMatchObject({ code: 11 });

        const del = runPlugin(netns, "DEL", victim, { ...conf, prevResult: added?.json });
        expect(del.status, del.stdout).toBe(0);
        // The runtime removes the sandbox's netns after its DEL; with it goes a retired pair
        // (the kernel's netns cleanup runs in a worker of its own, a moment later).
        fx.deleteNetns(path.basename(victim.netns));
        await eventually(
          "no device of ours left",
          () => !/netkit-cni:|netkit-del:/.test(inNs(netns, "ip", ["-o", "link"])),
          10_000,
          () => inNs(netns, "ip", ["-o", "link"]),
        );
        expect(reserved().filter((f) => /^\d/.test(f))).toEqual([]);
        const nextPod = pod("next");
        const next = runPlugin(netns, "ADD", nextPod, conf);
        expect(next.status, next.stdout).toBe(0);
        expect(runPlugin(netns, "DEL", nextPod, { ...conf, prevResult: next.json }).status).toBe(0);
      },
    );
  });
});
