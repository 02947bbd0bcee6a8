/**
 * Service translation's programs (bpf/bpf_svc.c) on a cgroup of the test's own, with
 * clients (tools/svcpeer.py) run in it and in a namespace recorded as a pod's: a
 * connect or send to a ClusterIP reaches a backend, and the ClusterIP is what the client
 * sees back; a namespace not recorded is never translated; a Service without backends
 * refuses; a table read mid-change is left alone.
 *
 * Nothing routes the ClusterIPs here, so a connect that is not translated fails with
 * ENETUNREACH at once: only translation can reach a backend.
 */
import { execFileSync, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { BpfLink } from "../../src/bpf/loader/links";
import { backendValue, idBytes, SVC_PROGRAM_NAMES, slotKey, svcKey, svcValue } from "../../src/bpf/svc/abi";
import {
  loadSvcPrograms,
  readSvcClients,
  readSvcCounters,
  recordSvcPod,
  type SvcPrograms,
  svcTables,
} from "../../src/bpf/svc/objects";
import { ServiceTable } from "../../src/bpf/svc/table";
import { makeTestCgroup, removeTestCgroup } from "../support/cgroup";
import { attachToCgroup, buildObjects, objectsDir } from "./helpers/bpf-objects";
import { TestBpffs } from "./helpers/bpffs";
import { TestNetns } from "./helpers/test-netns";

const TOOLS = path.resolve(__dirname, "../integration/tools");
const PEER = path.join(TOOLS, "svcpeer.py");

let bpffs: TestBpffs;
let pod: TestNetns;
let stranger: TestNetns;
/** Another recorded pod, whose traffic must never cost `pod` what is its own. */
let neighbour: TestNetns;
let cgroup: string;
let svc: SvcPrograms;
let table: ServiceTable;
const links: BpfLink[] = [];
const servers: { kill(): void }[] = [];

const B1 = { ip: "10.200.0.2", port: 8080 };
const B2 = { ip: "10.200.0.3", port: 8080 };
const B1v6 = { ip: "fd00:200::2", port: 8080 };
const B2v6 = { ip: "fd00:200::3", port: 8080 };

/** Runs svcpeer in `ns` and in the test's cgroup; its one line of output. */
function client(ns: TestNetns, ...args: string[]): string {
  const r = spawnSync(
    "sh",
    ["-c", `echo $$ > ${cgroup}/cgroup.procs && exec nsenter --net=${ns.path} python3 ${PEER} "$@"`, "peer", ...args],
    { encoding: "utf8", timeout: 30_000 },
  );
  if (r.status !== 0) throw new Error(`svcpeer ${args.join(" ")}: ${r.stderr}`);
  return r.stdout.trim();
}

function startServers(ns: TestNetns, name: string, hosts: string[]): void {
  const child = execFileSync("sh", [
    "-c",
    `nsenter --net=${ns.path} python3 ${PEER} serve ${name} 8080 ${hosts.join(" ")} >/dev/null 2>&1 & echo $!`,
  ]);
  const pid = Number(child.toString().trim());
  servers.push({ kill: () => process.kill(pid, "SIGKILL") });
}

function netnsCookie(ns: TestNetns): bigint {
  return BigInt(ns.run("python3", PEER, "cookie").trim());
}

/** Who answered each of `n` TCP connects to `ip`:80, made by one client of `from`. */
function answers(n: number, ip: string, from: TestNetns = pod): string[] {
  return client(from, "tcp", ip, "80", String(n))
    .split("\n")
    .map((line) => line.split(" ")[0] ?? "");
}

beforeAll(async () => {
  buildObjects();
  const object = fs.readFileSync(path.join(objectsDir, "bpf_svc.o"));
  bpffs = TestBpffs.mount();
  pod = TestNetns.create("svp");
  stranger = TestNetns.create("svs");
  neighbour = TestNetns.create("svn");
  for (const ns of [pod, stranger, neighbour]) {
    for (const ip of ["10.200.0.2/32", "10.200.0.3/32", "fd00:200::2/128", "fd00:200::3/128"]) {
      ns.ip("addr", "add", ip, "dev", "lo", ...(ip.includes(":") ? ["nodad"] : []));
    }
    startServers(ns, "b1", [B1.ip, B1v6.ip]);
    startServers(ns, "b2", [B2.ip, B2v6.ip]);
  }
  cgroup = makeTestCgroup(`nkb-svc-${process.pid}`);
  svc = loadSvcPrograms(bpffs.root, object, 1);
  attachToCgroup(object, Object.values(svc.programs), cgroup, links);
  recordSvcPod(svc.maps, 1000, netnsCookie(pod));
  recordSvcPod(svc.maps, 1001, netnsCookie(neighbour));
  table = new ServiceTable(svcTables(svc.maps));
  table.write({ frontend: { ip: "10.96.0.10", port: 80, protocol: "TCP" }, backends: [B1, B2] });
  table.write({ frontend: { ip: "10.96.0.10", port: 53, protocol: "UDP" }, backends: [B1, B2] });
  table.write({ frontend: { ip: "fd00:96::10", port: 80, protocol: "TCP" }, backends: [B1v6, B2v6] });
  table.write({ frontend: { ip: "fd00:96::10", port: 53, protocol: "UDP" }, backends: [B1v6, B2v6] });
  // Servers take a moment to bind.
  for (let i = 0; i < 50 && !client(pod, "tcp", B1.ip, "8080").startsWith("b1"); i++) {
    await new Promise((r) => setTimeout(r, 100));
  }
}, 120_000);

afterAll(() => {
  for (const s of servers) s.kill();
  for (const link of links) link.close();
  svc?.close();
  bpffs?.release();
  pod?.destroy();
  stranger?.destroy();
  neighbour?.destroy();
  if (cgroup) removeTestCgroup(cgroup, 50);
});

describe("a pod's socket naming a ClusterIP", () => {
  it("reaches both backends over TCP, and getpeername shows the ClusterIP (IPv4, IPv6, IPv4-mapped)", () => {
    for (const [mode, ip] of [
      ["tcp", "10.96.0.10"],
      ["tcp", "fd00:96::10"],
      ["tcpv6", "::ffff:10.96.0.10"],
    ] as const) {
      const lines = client(pod, mode, ip, "80", "16").split("\n");
      expect(lines).toHaveLength(16);
      for (const line of lines) expect(line).toMatch(new RegExp(`^b[12] .* \\| peer ${ip.replace(/\./g, "\\.")}:80$`));
      expect(new Set(lines.map((l) => l.split(" ")[0]))).toEqual(new Set(["b1", "b2"]));
    }
  });

  it("translates UDP sends, and the reply comes from the ClusterIP (unconnected and connected)", () => {
    expect(client(pod, "udp", "10.96.0.10", "53")).toMatch(/^b[12] .* \| from 10\.96\.0\.10:53$/);
    expect(client(pod, "udpc", "10.96.0.10", "53")).toMatch(/^b[12] .* \| peer 10\.96\.0\.10:53$/);
    expect(client(pod, "udp", "fd00:96::10", "53")).toMatch(/^b[12] .* \| from fd00:96::10:53$/);
    expect(client(pod, "udpv6", "::ffff:10.96.0.10", "53")).toMatch(/^b[12] .* \| from ::ffff:10\.96\.0\.10:53$/);
  });

  it("leaves a port or protocol the Service does not have alone", () => {
    expect(client(pod, "tcp", "10.96.0.10", "81")).toBe("error ENETUNREACH");
    expect(client(pod, "udp", "10.96.0.10", "80")).toBe("error ENETUNREACH");
  });

  it("never translates a namespace no ADD recorded", () => {
    expect(client(stranger, "tcp", "10.96.0.10", "80")).toBe("error ENETUNREACH");
    expect(client(stranger, "udp", "fd00:96::10", "53")).toBe("error ENETUNREACH");
  });

  it("refuses a Service without ready backends with ECONNREFUSED, as kube-proxy's REJECT does", () => {
    const before = readSvcCounters(svc.maps.stats).refused;
    table.write({ frontend: { ip: "10.96.0.20", port: 80, protocol: "TCP" }, backends: [] });
    table.write({ frontend: { ip: "10.96.0.20", port: 53, protocol: "UDP" }, backends: [] });
    expect(client(pod, "tcp", "10.96.0.20", "80")).toBe("error ECONNREFUSED");
    expect(client(pod, "udp", "10.96.0.20", "53")).toBe("error ECONNREFUSED");
    expect(readSvcCounters(svc.maps.stats).refused - before).toBe(2n);
  });

  it("holds a pod to one backend with ClientIP affinity, and lets go when it is withdrawn", () => {
    const frontend = { ip: "10.96.0.30", port: 80, protocol: "TCP" } as const;
    table.write({ frontend, backends: [B1, B2], affinitySeconds: 600 });
    const first = answers(12, frontend.ip);
    expect(new Set(first).size).toBe(1);
    const held = first[0];
    const other = held === "b1" ? B2 : B1;
    table.write({ frontend, backends: [other], affinitySeconds: 600 });
    expect(new Set(answers(4, frontend.ip))).toEqual(new Set([held === "b1" ? "b2" : "b1"]));
  });

  it("bounds each pod's affinity: a neighbour held to more Services than a pod may be gives up only its own", () => {
    const mine = { ip: "10.96.1.1", port: 80, protocol: "TCP" } as const;
    table.write({ frontend: mine, backends: [B1, B2], affinitySeconds: 600 });
    const held = new Set(answers(8, mine.ip));
    expect(held.size).toBe(1);
    // 40 Services with affinity (5 in each of a pod's 8 sets of 4), each held once by the
    // neighbour: more than its 32, so it gives up 8 of its own.
    const theirs = Array.from({ length: 40 }, (_, i) => `10.96.2.${i + 1}`);
    for (const ip of theirs)
      table.write({ frontend: { ip, port: 80, protocol: "TCP" }, backends: [B1, B2], affinitySeconds: 600 });
    expect(client(neighbour, "tcpeach", "80", ...theirs).split("\n")).toHaveLength(40);
    const state = readSvcClients(svc.maps);
    expect(state.get(1001)).toMatchObject({ affinityHeld: 32 });
    expect(state.get(1001)?.affinityReplaced).toBeGreaterThanOrEqual(8n);
    expect(state.get(1000)?.affinityReplaced).toBe(0n);
    // The pod's own affinity is where it was: twelve connects, one backend.
    expect(new Set(answers(12, mine.ip))).toEqual(held);
    for (const ip of theirs) table.remove({ ip, port: 80, protocol: "TCP" });
  });

  it("keeps an unconnected UDP socket on one backend per Service, four Services a socket, its own oldest giving way", () => {
    const frontends = [1, 2, 3, 4, 5].map((i) => `10.96.3.${i}`);
    for (const ip of frontends) table.write({ frontend: { ip, port: 53, protocol: "UDP" }, backends: [B1, B2] });
    const before = readSvcClients(svc.maps).get(1000)?.socketReplaced ?? 0n;
    // One socket: the same Service eight times (one backend answers, shown as the Service)...
    const same = client(pod, "udpeach", "53", ...Array(8).fill(frontends[0])).split("\n");
    expect(new Set(same.map((l) => l.split(" ")[0]))).toHaveProperty("size", 1);
    for (const line of same) expect(line).toMatch(/\| from 10\.96\.3\.1:53$/);
    // ...and five Services in turn, twice: each reply shown as the Service it answers for,
    // the socket giving up its own least recently used Service for the fifth.
    const lines = client(pod, "udpeach", "53", ...frontends, ...frontends).split("\n");
    expect(lines.map((l) => /from (\S+):53$/.exec(l)?.[1])).toEqual([...frontends, ...frontends]);
    expect((readSvcClients(svc.maps).get(1000)?.socketReplaced ?? 0n) - before).toBeGreaterThanOrEqual(6n);
    for (const ip of frontends) table.remove({ ip, port: 53, protocol: "UDP" });
  });

  it("leaves a socket the kernel gives no socket storage to the stack, and counts it for its pod", () => {
    // Socket storage is charged to the socket's option memory, bounded per namespace.
    const optmem = neighbour.run("sysctl", "-n", "net.core.optmem_max").trim();
    const before = readSvcClients(svc.maps).get(1001)?.noSocketState ?? 0n;
    neighbour.sysctl("net.core.optmem_max", "64");
    try {
      expect(client(neighbour, "tcp", "10.96.0.10", "80")).toBe("error ENETUNREACH");
      expect(client(neighbour, "udp", "10.96.0.10", "53")).toBe("error ENETUNREACH");
    } finally {
      neighbour.sysctl("net.core.optmem_max", optmem);
    }
    expect((readSvcClients(svc.maps).get(1001)?.noSocketState ?? 0n) - before).toBe(2n);
    expect(client(neighbour, "tcp", "10.96.0.10", "80")).toMatch(/^b[12] .* \| peer 10\.96\.0\.10:80$/);
  });

  it("sends only to the backends left after a withdrawal", () => {
    const frontend = { ip: "10.96.0.40", port: 80, protocol: "TCP" } as const;
    table.write({ frontend, backends: [B1, B2] });
    table.write({ frontend, backends: [B2] });
    expect(new Set(answers(10, frontend.ip))).toEqual(new Set(["b2"]));
    table.remove(frontend);
    expect(client(pod, "tcp", frontend.ip, "80")).toBe("error ENETUNREACH");
  });

  it("leaves a connect to the stack when a slot names another Service's backend (a read mid-change)", () => {
    // Hand-made: Service 900's only slot names backend 900, which belongs to Service 901.
    svc.maps.backends.update(idBytes(900), backendValue({ svcId: 901, ...B1 }));
    svc.maps.slots.update(slotKey(900, 0), idBytes(900));
    svc.maps.services.update(
      svcKey({ ip: "10.96.0.50", port: 80, protocol: "TCP" }),
      svcValue({ id: 900, backends: 1 }),
    );
    const before = readSvcCounters(svc.maps.stats).unsure;
    expect(client(pod, "tcp", "10.96.0.50", "80")).toBe("error ENETUNREACH");
    expect(readSvcCounters(svc.maps.stats).unsure - before).toBe(1n);
  });

  it("counts what it translated and showed back", () => {
    const before = readSvcCounters(svc.maps.stats);
    client(pod, "udp", "10.96.0.10", "53");
    const after = readSvcCounters(svc.maps.stats);
    expect(after.translated - before.translated).toBe(1n);
    expect(after.reversed - before.reversed).toBe(1n);
  });

  it("loads the eight programs under their hooks' names", () => {
    expect(
      Object.values(svc.programs)
        .map((p) => p.name)
        .sort(),
    ).toEqual(Object.values(SVC_PROGRAM_NAMES).sort());
  });
});
