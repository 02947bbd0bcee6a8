/**
 * `netkit-cni agent --service-translation` in a node's namespace against the stand-in API
 * server: the node's Service tables follow the API's Services and EndpointSlices (ready
 * endpoints, withdrawn ones, a deleted Service, internalTrafficPolicy Local, named ports),
 * nothing is written before both kinds are listed, bad objects are skipped and counted in
 * /status, and a pod made with the agent's conflist reaches a Service's backend pods
 * through translation alone (no kube-proxy rules exist here).
 */
import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { openSvcMaps, ServiceTable, svcTables } from "../../src/bpf/index";
import { makeTestCgroup } from "../support/cgroup";
import { useStandInApi } from "../support/fixtures";
import { BINARY, type Fixture, runPlugin, uniqueName } from "../support/harness";
import type { StandInApiServer } from "../support/kube-apiserver";
import { AgentProcess, agentNode, eventually, makeNode, readJson, scrape, service, slice } from "./agent-harness";

const CLUSTER = ["10.40.0.0/16", "fd40::/48"];
const SELF = "node-a";
const PEER = path.resolve(__dirname, "../integration/tools/svcpeer.py");

describe("netkit-cni agent --service-translation", () => {
  let fx: Fixture;
  let api: StandInApiServer;
  useStandInApi((standIn) => {
    ({ fx, api } = standIn);
  });

  const agentArgs = (ipamDir: string) => [
    "--service-translation",
    "--skip-binary",
    "--host-interface",
    "uplink0",
    "--bpffs-root",
    fx.bpffsRoot,
    "--data-dir",
    ipamDir,
    "--resync-seconds",
    "1",
  ];

  /** The tables as the programs would read them: "ip:port/proto -> backends" sorted. */
  const tables = (): string[] => {
    const maps = openSvcMaps(fx.bpffsRoot);
    if (!maps) return [];
    try {
      return new ServiceTable(svcTables(maps))
        .entries()
        .map(
          (e) =>
            `${e.frontend.ip}:${e.frontend.port}/${e.frontend.protocol} -> ${e.backends
              .map((b) => `${b.ip}:${b.port}`)
              .sort()
              .join(",")}${e.affinitySeconds ? ` affinity ${e.affinitySeconds}` : ""}`,
        )
        .sort();
    } finally {
      maps.close();
    }
  };

  it("keeps the tables as the Services and EndpointSlices say, and counts what it cannot read", async () => {
    const netns = makeNode(fx, "nkas");
    const node = agentNode(fx, api, netns, SELF);
    api.addNode({ name: SELF, podCIDRs: ["10.40.1.0/24", "fd40:0:0:1::/64"], internalIPs: ["10.30.0.1", "fd30::1"] });
    api.put("services", service("web", "10.96.0.10", [{ name: "http", port: 80, targetPort: "web", protocol: "TCP" }]));
    api.put(
      "endpointslices",
      slice(
        "web-1",
        "web",
        "IPv4",
        [{ name: "http", port: 8080, protocol: "TCP" }],
        [
          { addresses: ["10.40.1.5"], conditions: { ready: true }, nodeName: SELF },
          { addresses: ["10.40.2.5"], conditions: { ready: true }, nodeName: "node-b" },
          { addresses: ["10.40.2.6"], conditions: { ready: false }, nodeName: "node-b" },
        ],
      ),
    );
    api.put(
      "services",
      service("dns", "fd00:96::a", [{ name: "dns", port: 53, protocol: "UDP" }], {
        internalTrafficPolicy: "Local",
        sessionAffinity: "ClientIP",
        sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } },
      }),
    );
    api.put(
      "endpointslices",
      slice(
        "dns-1",
        "dns",
        "IPv6",
        [{ name: "dns", port: 5353, protocol: "UDP" }],
        [
          { addresses: ["fd40:0:0:1::7"], nodeName: SELF },
          { addresses: ["fd40:0:0:2::7"], nodeName: "node-b" },
        ],
      ),
    );
    // Bad input: an SCTP port, a port without a number, and a slice address of the wrong family.
    api.put(
      "services",
      service("odd", "10.96.0.30", [
        { name: "s", port: 9, protocol: "SCTP" },
        { name: "x", protocol: "TCP" },
        { name: "ok", port: 81, protocol: "TCP" },
      ]),
    );
    api.put(
      "endpointslices",
      slice("odd-1", "odd", "IPv4", [{ name: "ok", port: 81, protocol: "TCP" }], [{ addresses: ["fd40::9"] }]),
    );
    api.put("services", {
      metadata: { namespace: "default", name: "ext" },
      spec: { type: "ExternalName", externalName: "x.example" },
    });

    const agent = AgentProcess.start(fx, node, agentArgs(fx.tempDir("nkt-ipam-")), {
      "cluster-cidr": CLUSTER.join(","),
    });
    const expected = [
      "10.96.0.10:80/TCP -> 10.40.1.5:8080,10.40.2.5:8080",
      "10.96.0.30:81/TCP -> ",
      "fd00:96::a:53/UDP -> fd40:0:0:1::7:5353 affinity 60",
    ];
    await eventually(
      "the tables",
      () => tables().join("|") === expected.join("|"),
      20_000,
      () => agent.log,
    );
    const status = JSON.parse(scrape(node, "/status")[1]);
    expect(status.services).toMatchObject({ synced: true, services: 3, skipped: { protocol: 1, port: 1, address: 1 } });
    const conflist = readJson(path.join(node.confDir, "10-netkit-cni.conflist"));
    expect(conflist.plugins[0]).toMatchObject({ serviceTranslation: true });
    // The node as `status` sees it before any pod: the agent's tables, no endpoints yet.
    const nodeStatus = spawnSync(BINARY, ["status", "--json", "--bpffs-root", fx.bpffsRoot], { encoding: "utf8" });
    expect(nodeStatus.stderr).toBe("");
    expect(JSON.parse(nodeStatus.stdout)).toMatchObject({ endpoints: { devices: 0, addresses: 0 } });
    // And a runtime's DEL of a pod that never came (its sandbox failed) succeeds there.
    const del = runPlugin(
      netns,
      "DEL",
      { containerId: "never-added", ifname: "eth0", netns: "" },
      { ...conflist.plugins[0], cniVersion: "1.1.0", name: conflist.name },
    );
    expect(del).toMatchObject({ status: 0 });

    // An endpoint stops being ready, another becomes ready; dns loses its Service.
    api.put(
      "endpointslices",
      slice(
        "web-1",
        "web",
        "IPv4",
        [{ name: "http", port: 8080, protocol: "TCP" }],
        [
          { addresses: ["10.40.1.5"], conditions: { ready: false }, nodeName: SELF },
          { addresses: ["10.40.2.5"], conditions: { ready: true }, nodeName: "node-b" },
          { addresses: ["10.40.2.6"], conditions: { ready: true }, nodeName: "node-b" },
        ],
      ),
    );
    api.remove("services", "default", "dns");
    const after = ["10.96.0.10:80/TCP -> 10.40.2.5:8080,10.40.2.6:8080", "10.96.0.30:81/TCP -> "];
    await eventually(
      "the tables after the changes",
      () => tables().join("|") === after.join("|"),
      20_000,
      () => agent.log,
    );
    // Every endpoint gone: serving-and-terminating ones stand in, as kube-proxy does.
    api.put(
      "endpointslices",
      slice(
        "web-1",
        "web",
        "IPv4",
        [{ name: "http", port: 8080, protocol: "TCP" }],
        [{ addresses: ["10.40.2.5"], conditions: { ready: false, serving: true, terminating: true } }],
      ),
    );
    await eventually("terminating backends", () => tables()[0] === "10.96.0.10:80/TCP -> 10.40.2.5:8080", 20_000);
    await agent.kill("SIGTERM");
  });

  it("takes a pod made with its conflist to the Service's backend pod by translation alone, and closes its connection when the backend is withdrawn", async () => {
    const netns = makeNode(fx, "nkas");
    const node = agentNode(fx, api, netns, SELF);
    api.addNode({ name: SELF, podCIDRs: ["10.40.1.0/24", "fd40:0:0:1::/64"], internalIPs: ["10.30.0.1", "fd30::1"] });
    const agent = AgentProcess.start(fx, node, agentArgs(fx.tempDir("nkt-ipam-")), {
      "cluster-cidr": CLUSTER.join(","),
    });
    const file = path.join(node.confDir, "10-netkit-cni.conflist");
    await eventually(
      "the conflist",
      () => fs.existsSync(file),
      20_000,
      () => agent.log,
    );
    // The test's pods run in a cgroup of its own; the conflist's is the node's root.
    const cgroup = makeTestCgroup(uniqueName("nkt-svca"));
    fx.processes.push({
      kill: () => {
        try {
          fs.rmdirSync(cgroup);
        } catch {
          // a client still leaving: the next run's cleanup of its own cgroup is unaffected
        }
      },
    });
    const conflist = readJson(file);
    const conf = { ...conflist.plugins[0], cniVersion: "1.1.0", name: conflist.name, serviceTranslationCgroup: cgroup };
    const add = (id: string) => {
      const pod = fx.makeNetns("nkp");
      const r = runPlugin(netns, "ADD", { containerId: id, netns: `/run/netns/${pod}`, ifname: "eth0" }, conf);
      if (r.status !== 0) throw new Error(`ADD ${id}: ${r.stdout}`);
      const ip = ((r.json?.ips ?? []) as { address: string }[]).find((i) => !i.address.includes(":"))?.address;
      return { netns: pod, ip: ip?.split("/")[0] ?? "" };
    };
    const backend = add("backend");
    const backend2 = add("backend2");
    const client = add("client");
    for (const [pod, name] of [
      [backend, "web"],
      [backend2, "web2"],
    ] as const) {
      const server = spawn("nsenter", [`--net=/run/netns/${pod.netns}`, "python3", PEER, "serve", name, "8080"], {
        stdio: ["ignore", "pipe", "inherit"],
      });
      fx.processes.push({ kill: () => server.kill("SIGKILL") });
      await new Promise<void>((resolve) => server.stdout.once("data", () => resolve()));
    }
    api.put("services", service("web", "10.96.0.10", [{ port: 80, protocol: "TCP" }]));
    api.put(
      "endpointslices",
      slice("web-1", "web", "IPv4", [{ port: 8080, protocol: "TCP" }], [{ addresses: [backend.ip], nodeName: SELF }]),
    );
    const run = () =>
      spawnSync(
        "sh",
        [
          "-c",
          `echo $$ > ${cgroup}/cgroup.procs && exec nsenter --net=/run/netns/${client.netns} python3 ${PEER} tcp 10.96.0.10 80`,
        ],
        { encoding: "utf8" },
      ).stdout.trim();
    await eventually(
      "the Service to answer",
      () => run().startsWith("web "),
      20_000,
      () => agent.log,
    );
    // The backend saw the client's own address; the client sees the ClusterIP.
    expect(run()).toMatch(new RegExp(`^web ${client.ip.replace(/\./g, "\\.")}:\\d+ \\| peer 10\\.96\\.0\\.10:80$`));

    // A connection held open to the backend, which is then withdrawn for another.
    const held = spawn(
      "sh",
      [
        "-c",
        `echo $$ > ${cgroup}/cgroup.procs && exec nsenter --net=/run/netns/${client.netns} python3 ${PEER} hold 10.96.0.10 80`,
      ],
      { stdio: ["pipe", "pipe", "inherit"] },
    );
    fx.processes.push({ kill: () => held.kill("SIGKILL") });
    let said = "";
    held.stdout.on("data", (d: Buffer) => {
      said += d.toString();
    });
    await eventually("the held connection", () => said.startsWith("connected 10.96.0.10:80 cookie "), 20_000);
    api.put(
      "endpointslices",
      slice("web-1", "web", "IPv4", [{ port: 8080, protocol: "TCP" }], [{ addresses: [backend2.ip], nodeName: SELF }]),
    );
    await eventually(
      "new connections to the other backend",
      () => run().startsWith("web2 "),
      20_000,
      () => agent.log,
    );
    held.stdin.write("still there?\n");
    await eventually(
      "the held connection closed",
      () => said.includes("closed ECONNABORTED"),
      20_000,
      () => said,
    );
    expect(JSON.parse(scrape(node, "/status")[1]).services.closedSockets).toBe(1);
    // Each pod's own Service translation state is in the metrics: nothing held by
    // affinity, nothing refused, nothing of its own given up.
    const metrics = scrape(node, "/metrics")[1];
    expect(metrics).toMatch(/^netkit_cni_pod_service_affinity_held\{pod="client",interface="eth0"\} 0$/m);
    for (const event of ["no-socket-state", "socket-replaced", "affinity-replaced"]) {
      expect(metrics).toContain(
        `netkit_cni_pod_service_state_total{pod="client",interface="eth0",event="${event}"} 0\n`,
      );
    }
    await agent.kill("SIGTERM");
  });
});
