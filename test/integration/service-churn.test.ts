/**
 * Service translation under another pod's churn, through the real executable: a victim
 * pod holds what resolvers, DNS caches and metrics clients hold (a connected UDP socket
 * to a ClusterIP) and an idle TCP connection through another; a second pod on the node
 * then names a Service from several times as many fresh sockets as a node-wide table of
 * 65536 reply entries could remember. The victim's replies must still come from the
 * ClusterIP (recvfrom's source) and its connection's peer must still be the ClusterIP
 * (getpeername): glibc's resolver drops an answer from any other address.
 *
 * Nothing routes the ClusterIPs (no kube-proxy rules here): only translation reaches
 * a backend.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { openSvcMaps, readSvcCounters, type ServiceEntry, ServiceTable, svcTables } from "../../src/bpf/index";
import { ceiling } from "../support/ceiling";
import { makeTestCgroup, removeTestCgroup } from "../support/cgroup";
import { Fixture, uniqueName } from "../support/harness";
import { addPod, type ClusterNode, makeCluster, type Pod } from "../support/topology";

const PEER = path.resolve(__dirname, "tools/svcpeer.py");
/** Fresh sockets the churning pod names a Service from: three times the 65536 entries a
 * node-wide table of the way back would hold. */
const CHURN = 200_000;

/** tools/svcchurn.c, compiled once per run of this file. */
let churnTool: string;

beforeAll(() => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nkt-svcchurn-"));
  churnTool = path.join(dir, "svcchurn");
  execFileSync("clang", ["-O2", "-Wall", "-Werror", "-o", churnTool, path.join(__dirname, "tools/svcchurn.c")]);
});
afterAll(() => fs.rmSync(path.dirname(churnTool), { recursive: true, force: true }));

let fx: Fixture;
let node: ClusterNode;
let cgroup: string;

beforeEach(() => {
  cgroup = makeTestCgroup(uniqueName("nkt-svcc"));
  fx = new Fixture();
  [node] = makeCluster(fx, { serviceTranslation: true, serviceTranslationCgroup: cgroup });
});

afterEach(() => {
  fx.cleanup();
  removeTestCgroup(cgroup);
});

/** A command in `pod`'s namespace and the test's cgroup (where the programs run). */
function inPod(pod: Pod, command: string[]): [string, string[]] {
  return [
    "sh",
    ["-c", `echo $$ > ${cgroup}/cgroup.procs && exec nsenter --net=/run/netns/${pod.netns} "$@"`, "pod", ...command],
  ];
}

async function backend(name: string): Promise<Pod> {
  const pod = addPod(fx, node, name);
  const child = spawn("nsenter", [`--net=/run/netns/${pod.netns}`, "python3", PEER, "serve", name, "8080"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  fx.processes.push({ kill: () => child.kill("SIGKILL") });
  await firstLine(child);
  return pod;
}

function firstLine(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = "";
    const onData = (d: Buffer) => {
      got += d.toString();
      const nl = got.indexOf("\n");
      if (nl >= 0) {
        child.stdout?.off("data", onData);
        resolve(got.slice(0, nl));
      }
    };
    child.stdout?.on("data", onData);
    child.once("exit", (code) => reject(new Error(`exited with ${code} before a line`)));
  });
}

/** The victim's long-lived client: ask() sends a line and returns what it printed. */
async function victimClient(pod: Pod, ip: string): Promise<{ ask(line: string): Promise<string> }> {
  const [cmd, args] = inPod(pod, ["python3", PEER, "victim", ip, "53", "80"]);
  const child = spawn(cmd, args, { stdio: ["pipe", "pipe", "inherit"] });
  fx.processes.push({ kill: () => child.kill("SIGKILL") });
  expect(await firstLine(child)).toBe("ready");
  return {
    ask: async (line) => {
      const answer = firstLine(child);
      child.stdin?.write(`${line}\n`);
      return answer;
    },
  };
}

function writeServices(...entries: ServiceEntry[]): void {
  const maps = openSvcMaps(node.bpffsRoot);
  if (!maps) throw new Error("no Service tables");
  try {
    const table = new ServiceTable(svcTables(maps));
    for (const entry of entries) table.write(entry);
  } finally {
    maps.close();
  }
}

function translated(): bigint {
  const maps = openSvcMaps(node.bpffsRoot);
  if (!maps) throw new Error("no Service tables");
  try {
    return readSvcCounters(maps.stats).translated;
  } finally {
    maps.close();
  }
}

describe("Service translation under another pod's churn", () => {
  it(
    "keeps showing a pod's connected UDP socket and idle TCP connection the ClusterIP while another pod churns",
    async () => {
      const b1 = await backend("b1");
      const victim = addPod(fx, node, "victim");
      const churner = addPod(fx, node, "churner");
      const dns = "10.96.0.10";
      writeServices(
        { frontend: { ip: dns, port: 53, protocol: "UDP" }, backends: [{ ip: b1.v4, port: 8080 }] },
        { frontend: { ip: dns, port: 80, protocol: "TCP" }, backends: [{ ip: b1.v4, port: 8080 }] },
        // What the churning pod names: a Service of its own, whose backend port has no
        // listener (its sends and SYNs meet an ICMP error or a reset, as fast as can be).
        { frontend: { ip: "10.96.0.20", port: 53, protocol: "UDP" }, backends: [{ ip: b1.v4, port: 9 }] },
        { frontend: { ip: "10.96.0.20", port: 80, protocol: "TCP" }, backends: [{ ip: b1.v4, port: 9 }] },
      );
      const client = await victimClient(victim, dns);
      const shown = new RegExp(`^udp from ${dns}:53 \\| tcp peer ${dns}:80 \\| tcp b1 `);
      expect(await client.ask("before")).toMatch(shown);

      const before = translated();
      const churn = (port: string, count: number, mode: string) => {
        const [cmd, args] = inPod(churner, [churnTool, "10.96.0.20", port, String(count), mode]);
        return execFileSync(cmd, args, { encoding: "utf8", timeout: ceiling(300_000) }).trim();
      };
      // Mostly connected UDP sockets that ask getpeername (translated at connect, nothing
      // sent), some sends and TCP connects: every one a fresh socket, every one
      // translated. Asking for the peer, as clients do, is what marks an entry of an LRU
      // table as used: a churn of entries nobody reads again would only evict its own.
      const parts = [
        ["53", CHURN - 20_000, "udp-connect"],
        ["53", 10_000, "udp-send"],
        ["80", 10_000, "tcp-connect"],
      ] as const;
      for (const [port, count, mode] of parts) expect(churn(port, count, mode)).toBe(`${count} tried, 0 failed`);
      expect(translated() - before).toBeGreaterThanOrEqual(BigInt(CHURN));

      expect(await client.ask("after")).toMatch(shown);
    },
    ceiling(600_000),
  );
});
