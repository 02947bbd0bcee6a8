/**
 * Service translation through the real executable ("serviceTranslation": true): pods
 * made by ADD on two nodes, Services written into the node's tables as their one writer
 * does (bpf/svc-table.ts), clients (tools/svcpeer.py) run in a pod's namespace and in a
 * cgroup of the test's own, which the network's "serviceTranslationCgroup" names.
 *
 * Nothing routes the ClusterIPs (no kube-proxy rules here): a connect that is not
 * translated fails with ENETUNREACH, so only translation can reach a backend.
 */
import { spawn, spawnSync } from "node:child_process";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { probeJit } from "../../src/bpf/fastpath/kernel-probe";
import { openSvcMaps, type ServiceEntry, ServiceTable, svcTables } from "../../src/bpf/index";
import { countersOf } from "../../src/datapath/node-state";
import { ceiling } from "../support/ceiling";
import { makeTestCgroup, removeTestCgroup } from "../support/cgroup";
import { BINARY, Fixture, inNs, pluginLinks, runPlugin, uniqueName } from "../support/harness";
import { addPod, type ClusterNode, delPod, ifindexOf, makeCluster, type Pod } from "../support/topology";

const PEER = path.resolve(__dirname, "tools/svcpeer.py");

let fx: Fixture;
let nodes: [ClusterNode, ClusterNode];
let cgroup: string;

beforeEach(() => {
  cgroup = makeTestCgroup(uniqueName("nkt-svc"));
  fx = new Fixture();
  nodes = makeCluster(fx, { serviceTranslation: true, serviceTranslationCgroup: cgroup });
});

afterEach(() => {
  fx.cleanup();
  removeTestCgroup(cgroup);
});

/** svcpeer in `pod`'s namespace and the test's cgroup: what it printed. */
function client(pod: Pod, ...args: string[]): string {
  const r = spawnSync(
    "sh",
    [
      "-c",
      `echo $$ > ${cgroup}/cgroup.procs && exec nsenter --net=/run/netns/${pod.netns} python3 ${PEER} "$@"`,
      "peer",
      ...args,
    ],
    { encoding: "utf8", timeout: ceiling(60_000) },
  );
  if (r.status !== 0) throw new Error(`svcpeer ${args.join(" ")}: ${r.stderr}`);
  return r.stdout.trim();
}

/** A backend pod answering as `name` on port 8080 of both its addresses. */
async function backend(node: ClusterNode, name: string): Promise<Pod> {
  const pod = addPod(fx, node, name);
  const child = spawn("nsenter", [`--net=/run/netns/${pod.netns}`, "python3", PEER, "serve", name, "8080"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  fx.processes.push({ kill: () => child.kill("SIGKILL") });
  await new Promise<void>((resolve, reject) => {
    child.stdout.once("data", () => resolve());
    child.once("exit", (code) => reject(new Error(`server ${name} exited with ${code}`)));
  });
  return pod;
}

/** A pod of a second network on `node`, one that does not ask for translation. */
function plainPod(node: ClusterNode): Pod {
  const ipam = node.conf.ipam as Record<string, unknown>;
  const n = node.name === "a" ? 1 : 2;
  return addPod(fx, node, "plain", {
    ...node.conf,
    name: "plain",
    serviceTranslation: false,
    ipam: {
      ...ipam,
      ranges: [
        [{ subnet: node.podSubnet4, rangeStart: `10.221.${n}.200`, rangeEnd: `10.221.${n}.250` }],
        [{ subnet: node.podSubnet6, rangeStart: `fd21:${n}::200`, rangeEnd: `fd21:${n}::250` }],
      ],
    },
  });
}

/** Writes Services into `node`'s tables, as the agent would. */
function writeServices(node: ClusterNode, ...entries: ServiceEntry[]): void {
  const maps = openSvcMaps(node.bpffsRoot);
  if (!maps) throw new Error(`node ${node.name} has no Service tables`);
  try {
    const table = new ServiceTable(svcTables(maps));
    for (const entry of entries) table.write(entry);
  } finally {
    maps.close();
  }
}

const netnsEntries = (node: ClusterNode): number => {
  const maps = openSvcMaps(node.bpffsRoot);
  try {
    return maps ? maps.netns.countKeys() : 0;
  } finally {
    maps?.close();
  }
};

describe("Service translation, pods made by the plugin", () => {
  it("takes a client pod to backends on both nodes, in both families, TCP and UDP, showing the ClusterIP", async () => {
    const [a, b] = nodes;
    const b1 = await backend(a, "b1");
    const b2 = await backend(b, "b2");
    const cli = addPod(fx, a, "cli");
    for (const [ip, family] of [
      ["10.96.0.10", "v4"],
      ["fd00:96::10", "v6"],
    ] as const) {
      const backends = [b1, b2].map((p) => ({ ip: p[family], port: 8080 }));
      for (const node of nodes) {
        writeServices(
          node,
          { frontend: { ip, port: 80, protocol: "TCP" }, backends },
          { frontend: { ip, port: 53, protocol: "UDP" }, backends },
        );
      }
      const lines = client(cli, "tcp", ip, "80", "16").split("\n");
      for (const line of lines) expect(line).toMatch(new RegExp(`^b[12] .* \\| peer ${ip}:80$`));
      expect(new Set(lines.map((l) => l.split(" ")[0]))).toEqual(new Set(["b1", "b2"]));
      // The backend saw the client pod's own address: no NAT on the way.
      expect(lines[0]).toContain(` ${cli[family]}:`);
      expect(client(cli, "udp", ip, "53")).toMatch(new RegExp(`^b[12] ${cli[family]}:\\d+ \\| from ${ip}:53$`));
    }
  });

  it("takes the translated flow on the fast path: a pod-to-pod flow from its first packet", async () => {
    const [a] = nodes;
    const b1 = await backend(a, "b1");
    const cli = addPod(fx, a, "cli");
    writeServices(a, {
      frontend: { ip: "10.96.0.10", port: 80, protocol: "TCP" },
      backends: [{ ip: b1.v4, port: 8080 }],
    });
    const before = countersOf(a.bpffsRoot, ifindexOf(a.netns, cli.hostDevice));
    expect(client(cli, "tcp", "10.96.0.10", "80", "4").split("\n")).toHaveLength(4);
    const after = countersOf(a.bpffsRoot, ifindexOf(a.netns, cli.hostDevice));
    if (!before || !after) throw new Error("no counters");
    expect(after.redirectedLocal - before.redirectedLocal).toBeGreaterThan(0n);
  });

  it("leaves pods of a network without translation, and the node's own sockets, alone", async () => {
    const [a] = nodes;
    const b1 = await backend(a, "b1");
    const plain = plainPod(a);
    writeServices(a, {
      frontend: { ip: "10.96.0.10", port: 80, protocol: "TCP" },
      backends: [{ ip: b1.v4, port: 8080 }],
    });
    expect(client(plain, "tcp", "10.96.0.10", "80")).toBe("error ENETUNREACH");
    const node = { netns: a.netns } as Pod;
    expect(client(node, "tcp", "10.96.0.10", "80")).toMatch(/^error (ENETUNREACH|ECONNREFUSED|ETIMEDOUT)$/);
  });

  it("agrees with kube-proxy's rules where they exist: the translated flow never meets them", async () => {
    const [a] = nodes;
    const b1 = await backend(a, "b1");
    const cli = addPod(fx, a, "cli");
    const plain = plainPod(a);
    // kube-proxy's part, as its nftables mode writes it: DNAT of the ClusterIP in the node.
    const nft = (...args: string[]) => inNs(a.netns, "nft", args);
    nft("add", "table", "ip", "kp");
    nft("add", "chain", "ip", "kp", "pre", "{ type nat hook prerouting priority -100; }");
    nft(
      "add",
      "rule",
      "ip",
      "kp",
      "pre",
      "ip",
      "daddr",
      "10.96.0.10",
      "tcp",
      "dport",
      "80",
      "counter",
      "dnat",
      "to",
      `${b1.v4}:8080`,
    );
    const dnatted = () => Number(/packets (\d+)/.exec(nft("list", "chain", "ip", "kp", "pre"))?.[1]);
    writeServices(a, {
      frontend: { ip: "10.96.0.10", port: 80, protocol: "TCP" },
      backends: [{ ip: b1.v4, port: 8080 }],
    });
    expect(client(cli, "tcp", "10.96.0.10", "80", "3").split("\n")).toEqual(
      Array(3).fill(expect.stringMatching(/^b1 .* \| peer 10\.96\.0\.10:80$/)),
    );
    expect(dnatted()).toBe(0);
    expect(client(plain, "tcp", "10.96.0.10", "80")).toMatch(/^b1 .* \| peer 10\.96\.0\.10:80$/);
    expect(dnatted()).toBe(1);
  });

  it("refuses a Service without ready backends with ECONNREFUSED", () => {
    const [a] = nodes;
    const cli = addPod(fx, a, "cli");
    writeServices(a, { frontend: { ip: "10.96.0.20", port: 80, protocol: "TCP" }, backends: [] });
    expect(client(cli, "tcp", "10.96.0.20", "80")).toBe("error ECONNREFUSED");
    // status says so, as an admin reads it.
    const status = spawnSync(
      "nsenter",
      [`--net=/run/netns/${a.netns}`, BINARY, "status", "--bpffs-root", a.bpffsRoot],
      {
        encoding: "utf8",
      },
    ).stdout;
    expect(status).toMatch(
      /^services +translated at connect for 1 pods: 1 Services, 0 backends; 0 translated, 1 refused/m,
    );
    // The tables are bounded, and status shows how full they are.
    expect(status).toMatch(/^ +nkc_svc_services +hash +1 +16384$/m);
    expect(status).toMatch(/^ +nkc_svc_backends +hash +0 +65536$/m);
    // Each pod's state is its own; status sums it, endpoints shows it per pod.
    expect(status).toMatch(
      /^services +pods' own state: affinity to 0 Services \(at most 32 a pod\); refused: 0 sockets without socket state \(left to the stack\); given up, each pod its own: 0 of a socket's Services, 0 affinities$/m,
    );
    const rows = JSON.parse(inNs(a.netns, BINARY, ["endpoints", "--bpffs-root", a.bpffsRoot, "--json"])) as {
      containerId: string;
      services?: Record<string, number>;
    }[];
    expect(rows.find((r) => r.containerId === "cli")?.services).toEqual({
      affinityHeld: 0,
      affinityCapacity: 32,
      noSocketState: 0,
      socketReplaced: 0,
      affinityReplaced: 0,
    });
    // Where the kernel cannot close a withdrawn backend's sockets (no JIT: the UML guest), it says so.
    expect(/^services +cannot close a withdrawn backend's sockets/m.test(status)).toBe(!probeJit());
  });

  it("forgets a pod's namespace at DEL, and GC forgets one whose DEL never came", () => {
    const [a] = nodes;
    const one = addPod(fx, a, "one");
    const two = addPod(fx, a, "two");
    expect(netnsEntries(a)).toBe(2);
    expect(delPod(one).status).toBe(0);
    expect(netnsEntries(a)).toBe(1);
    // The runtime lost the pod: its namespace goes, its DEL never comes.
    fx.deleteNetns(two.netns);
    const gc = runPlugin(a.netns, "GC", {}, { ...a.conf, "cni.dev/valid-attachments": [] });
    expect(gc.status).toBe(0);
    expect(netnsEntries(a)).toBe(0);
  });

  it("fails an ADD it cannot serve with code 50, leaving nothing behind", () => {
    const [a] = nodes;
    const notCgroup = fx.tempDir("nkt-notcg-");
    const conf = { ...a.conf, serviceTranslationCgroup: notCgroup };
    const netns = fx.makeNetns("nkp");
    const add = runPlugin(
      a.netns,
      "ADD",
      { containerId: "refused", netns: `/run/netns/${netns}`, ifname: "eth0" },
      conf,
    );
    expect(add.status).not.toBe(0);
    expect(add.json).toMatchObject({ code: 50 });
    expect(String(add.json?.msg)).toContain("not a cgroup v2 directory");
    expect(pluginLinks(a.netns)).toEqual([]);
  });
});
