/**
 * Service translation across a two-node cluster made only of what a user runs: the built
 * agent on each node (`--service-translation`) against the stand-in API server, pods made
 * by the plugin with the conflist each agent wrote, routes between the nodes made by the
 * agents, and no kube-proxy rule anywhere. A client pod on node A reaches a ClusterIP
 * Service whose backend pods are on both nodes, over TCP and UDP, seeing the ClusterIP;
 * when one backend's endpoint stops being ready, the client's connection to it is closed
 * and new connections go to the other.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { makeTestCgroup, removeTestCgroup } from "../support/cgroup";
import { useStandInApi } from "../support/fixtures";
import { type Fixture, inNs, runPlugin, uniqueName } from "../support/harness";
import type { StandInApiServer } from "../support/kube-apiserver";
import { type AgentNode, AgentProcess, agentNode, eventually, readJson, scrape, service, slice } from "./agent-harness";

const CLUSTER = ["10.40.0.0/16"];
const PEER = path.resolve(__dirname, "../integration/tools/svcpeer.py");

describe("Service translation across two nodes, agents and stand-in API only", () => {
  let fx: Fixture;
  let api: StandInApiServer;
  let cgroup: string;
  // Registered first, so the cgroup goes after the stand-in and the fixture's processes.
  beforeEach(() => {
    cgroup = makeTestCgroup(uniqueName("nkt-svcc"));
  });
  afterEach(() => removeTestCgroup(cgroup, 50));
  useStandInApi((standIn) => {
    ({ fx, api } = standIn);
  });

  /** Two node namespaces joined by a wire (10.30.0.1 and .2), each with its agent. */
  function twoNodes(): { node: AgentNode; agent: AgentProcess; bpffsRoot: string }[] {
    const a = fx.makeNetns("nksa");
    const b = fx.makeNetns("nksb");
    inNs(a, "ip", ["link", "add", "wire0", "type", "veth", "peer", "name", "wire0", "netns", `/run/netns/${b}`]);
    return [a, b].map((netns, i) => {
      const n = i + 1;
      inNs(netns, "ip", ["link", "set", "lo", "up"]);
      inNs(netns, "ip", ["addr", "add", `10.30.0.${n}/24`, "dev", "wire0"]);
      inNs(netns, "ip", ["link", "set", "wire0", "up"]);
      const name = `node-${n}`;
      api.addNode({ name, podCIDRs: [`10.40.${n}.0/24`], internalIPs: [`10.30.0.${n}`] });
      const node = agentNode(fx, api, netns, name);
      const bpffsRoot = `${fx.bpffsRoot}-${n}`;
      fx.extraBpffsRoots.push(bpffsRoot);
      const agent = AgentProcess.start(
        fx,
        node,
        [
          "--service-translation",
          "--skip-binary",
          "--host-interface",
          "wire0",
          "--bpffs-root",
          bpffsRoot,
          "--data-dir",
          fx.tempDir(`nkt-ipam-${n}-`),
          "--resync-seconds",
          "1",
        ],
        { "cluster-cidr": CLUSTER.join(",") },
      );
      return { node, agent, bpffsRoot };
    });
  }

  /** A pod made on `node` with its agent's conflist; its IPv4 address. */
  function addPod(node: AgentNode, id: string): { netns: string; ip: string } {
    const conflist = readJson(path.join(node.confDir, "10-netkit-cni.conflist"));
    const conf = { ...conflist.plugins[0], cniVersion: "1.1.0", name: conflist.name, serviceTranslationCgroup: cgroup };
    const netns = fx.makeNetns("nkp");
    const r = runPlugin(node.netns, "ADD", { containerId: id, netns: `/run/netns/${netns}`, ifname: "eth0" }, conf);
    if (r.status !== 0) throw new Error(`ADD ${id} on ${node.name}: ${r.stdout}`);
    const ip = ((r.json?.ips ?? []) as { address: string }[])[0]?.address.split("/")[0] ?? "";
    return { netns, ip };
  }

  async function serve(netns: string, name: string): Promise<void> {
    const server = spawn("nsenter", [`--net=/run/netns/${netns}`, "python3", PEER, "serve", name, "8080"], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    fx.processes.push({ kill: () => server.kill("SIGKILL") });
    await new Promise<void>((resolve) => server.stdout.once("data", () => resolve()));
  }

  /** svcpeer in the client pod and the test's cgroup. */
  const client = (netns: string, ...args: string[]) =>
    spawnSync(
      "sh",
      [
        "-c",
        `echo $$ > ${cgroup}/cgroup.procs && exec nsenter --net=/run/netns/${netns} python3 ${PEER} "$@"`,
        "peer",
        ...args,
      ],
      { encoding: "utf8", timeout: 60_000 },
    ).stdout.trim();

  it("reaches backends on both nodes through the ClusterIP, and moves a client off a withdrawn one", async () => {
    const [a, b] = twoNodes();
    if (!a || !b) throw new Error("two nodes");
    for (const n of [a, b]) {
      await eventually(
        `${n.node.name}'s conflist and routes`,
        () => JSON.parse(scrape(n.node, "/status")[1] || "{}").synced === true,
        30_000,
        () => n.agent.log,
      );
    }
    const b1 = addPod(a.node, "b1");
    const b2 = addPod(b.node, "b2");
    const cli = addPod(a.node, "cli");
    await serve(b1.netns, "b1");
    await serve(b2.netns, "b2");
    const endpoints = (ready: Record<string, boolean>) => [
      { addresses: [b1.ip], nodeName: "node-1", conditions: { ready: ready.b1 } },
      { addresses: [b2.ip], nodeName: "node-2", conditions: { ready: ready.b2 } },
    ];
    api.put(
      "services",
      service("web", "10.96.0.10", [
        { name: "http", port: 80, targetPort: "http" },
        { name: "dns", port: 53, protocol: "UDP" },
      ]),
    );
    api.put(
      "endpointslices",
      slice(
        "web-1",
        "web",
        "IPv4",
        [
          { name: "http", port: 8080, protocol: "TCP" },
          { name: "dns", port: 8080, protocol: "UDP" },
        ],
        endpoints({ b1: true, b2: true }),
      ),
    );

    // Both backends answer, each seeing the client's own address; the client sees the ClusterIP.
    let lines: string[] = [];
    await eventually(
      "both backends through the ClusterIP",
      () => {
        lines = client(cli.netns, "tcp", "10.96.0.10", "80", "16").split("\n");
        return new Set(lines.map((l) => l.split(" ")[0])).size === 2;
      },
      30_000,
      () => `${lines.join("\n")}\n${a.agent.log}`,
    );
    for (const line of lines)
      expect(line).toMatch(new RegExp(`^b[12] ${cli.ip.replace(/\./g, "\\.")}:\\d+ \\| peer 10\\.96\\.0\\.10:80$`));
    expect(client(cli.netns, "udp", "10.96.0.10", "53")).toMatch(/^b[12] .* \| from 10\.96\.0\.10:53$/);

    // A connection held to whichever backend it got; that backend's endpoint stops being ready.
    const held: ChildProcess = spawn(
      "sh",
      [
        "-c",
        `echo $$ > ${cgroup}/cgroup.procs && exec nsenter --net=/run/netns/${cli.netns} python3 ${PEER} hold 10.96.0.10 80`,
      ],
      { stdio: ["pipe", "pipe", "inherit"] },
    );
    fx.processes.push({ kill: () => held.kill("SIGKILL") });
    let said = "";
    held.stdout?.on("data", (d: Buffer) => {
      said += d.toString();
    });
    await eventually("the held connection", () => said.includes("cookie"), 20_000);
    held.stdin?.write("who\n");
    await eventually(
      "its backend's answer",
      () => /^b[12] who$/m.test(said),
      20_000,
      () => said,
    );
    const first = /^(b[12]) who$/m.exec(said)?.[1];
    const other = first === "b1" ? "b2" : "b1";
    api.put(
      "endpointslices",
      slice(
        "web-1",
        "web",
        "IPv4",
        [
          { name: "http", port: 8080, protocol: "TCP" },
          { name: "dns", port: 8080, protocol: "UDP" },
        ],
        endpoints({ b1: first !== "b1", b2: first !== "b2" }),
      ),
    );
    // The agent closes it: the next message after that fails (until then each is answered).
    await eventually(
      "the held connection closed",
      () => {
        if (!said.includes("closed")) held.stdin?.write("ping\n");
        return said.includes("closed");
      },
      30_000,
      () => `${said}\n${a.agent.log}`,
    );
    expect(said).toMatch(/^closed ECONNABORTED$/m);
    const after = client(cli.netns, "tcp", "10.96.0.10", "80", "8").split("\n");
    expect(new Set(after.map((l) => l.split(" ")[0]))).toEqual(new Set([other]));
    for (const n of [a, b]) await n.agent.kill("SIGTERM");
  });
});
