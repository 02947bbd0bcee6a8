/**
 * What an attacker who controls a container's ID or a pod's traffic could reach for: no
 * shell ever runs with input from a runtime, a container ID never becomes a file or
 * device name, what the plugin keeps on disk is readable by root alone, a "pod netns"
 * that is the node's own is refused, and nothing the runtime sends can forge a line of
 * the log. (The log file's 0600 and the bpffs root's 0700 are asserted where those are
 * made: protocol-errors and fastpath tests.)
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { BINARY, Fixture, inNs, pluginLinks, runPlugin } from "../support/harness";

const NODE_EXECUTABLE = process.env.NETKIT_CNI_TEST_BINARY === "node";

import { makeCluster } from "../support/topology";

const SRC = path.resolve(__dirname, "../../src");

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? sourceFiles(p) : p.endsWith(".ts") ? [p] : [];
  });
}

function walk(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? [p, ...walk(p)] : [p];
  });
}

let fx: Fixture;
beforeEach(() => {
  fx = new Fixture();
});
afterEach(() => fx.cleanup());

describe("security", () => {
  it("never runs a shell: only the IPAM delegation and the agent's nft spawn, each with an argument vector", () => {
    // Any way of reaching the module counts: a static import or a lazy require().
    const spawning = sourceFiles(SRC).filter((f) => /["'](node:)?child_process["']/.test(fs.readFileSync(f, "utf8")));
    expect(spawning.map((f) => path.relative(SRC, f)).sort()).toEqual(["agent/masquerade/table.ts", "cni/delegate.ts"]);
    for (const file of spawning) {
      const text = fs.readFileSync(file, "utf8");
      expect(text, file).not.toMatch(/shell\s*:/);
      expect(text, file).not.toMatch(/\bexec(Sync)?\(/);
    }
    expect(fs.readFileSync(path.join(SRC, "cni/delegate.ts"), "utf8")).toMatch(/spawnSync\(binary, \[\]/);
    expect(fs.readFileSync(path.join(SRC, "agent/masquerade/table.ts"), "utf8")).toMatch(/spawnSync\("nft", \[/);
  });

  it("keeps a container ID out of every name it creates", () => {
    const [node] = makeCluster(fx);
    const id = "evil..ID_with.dots-and_more";
    const pod = fx.makeNetns("nkp");
    const r = runPlugin(node.netns, "ADD", { containerId: id, netns: `/run/netns/${pod}`, ifname: "eth0" }, node.conf);
    expect(r.status, r.stdout).toBe(0);
    const dataDir = (node.conf.ipam as { dataDir: string }).dataDir;
    const names = [...walk(dataDir), ...walk(node.bpffsRoot), ...walk("/run/netkit-cni")].map((p) => path.basename(p));
    expect(names.filter((n) => n.includes(id) || n.includes(".."))).toEqual([]);
    expect(pluginLinks(node.netns).every((n) => /^nk[0-9a-f]{13}$/.test(n))).toBe(true);
    // The ID is recorded only as data: in the IPAM reservation and the device alias.
    const reservation = walk(path.join(dataDir, "cluster")).find((p) => /\d+\.\d+\.\d+\.\d+$/.test(p)) ?? "";
    expect(fs.readFileSync(reservation, "utf8")).toBe(`${id}\r\neth0`);
  });

  it("keeps its files readable by root alone", () => {
    const [node] = makeCluster(fx);
    const pod = fx.makeNetns("nkp");
    expect(
      runPlugin(node.netns, "ADD", { containerId: "perm", netns: `/run/netns/${pod}`, ifname: "eth0" }, node.conf)
        .status,
    ).toBe(0);
    const dataDir = (node.conf.ipam as { dataDir: string }).dataDir;
    // Only the Node executable has a native addon to extract (the Bun one binds libc
    // through bun:ffi); the folder stays from whichever run of it came last.
    const addons = "/var/lib/netkit-cni/addons";
    if (NODE_EXECUTABLE) expect(fs.existsSync(addons)).toBe(true);
    for (const p of [
      ...walk(path.join(dataDir, "cluster")),
      "/run/netkit-cni",
      ...(fs.existsSync(addons) ? [addons, ...walk(addons)] : []),
    ]) {
      const st = fs.statSync(p);
      expect(st.uid, p).toBe(0);
      expect(st.mode & 0o077, `${p} is open to others: ${(st.mode & 0o777).toString(8)}`).toBe(0);
    }
  });

  it("takes no settings or environment from files in the directory it was started in", () => {
    // A runtime may start the plugin anywhere; Bun's executables read .env and bunfig.toml
    // from there unless built not to. This .env would make a start without CNI_COMMAND
    // answer VERSION instead of failing.
    const dir = fx.tempDir("nkt-cwd-");
    fs.writeFileSync(path.join(dir, ".env"), "CNI_COMMAND=VERSION\n");
    fs.writeFileSync(
      path.join(dir, "preload.js"),
      `require("fs").writeFileSync(${JSON.stringify(path.join(dir, "ran"))}, "");\n`,
    );
    fs.writeFileSync(path.join(dir, "bunfig.toml"), `preload = ["./preload.js"]\n`);
    const r = spawnSync(BINARY, [], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
      input: "",
      encoding: "utf8",
    });
    expect(r.status, r.stdout).toBe(1);
    const err = JSON.parse(r.stdout);
    expect(err.supportedVersions).toBeUndefined();
    expect(err.msg).toMatch(/CNI_COMMAND/);
    expect(fs.readdirSync(dir).sort()).toEqual([".env", "bunfig.toml", "preload.js"]);
  });
});

describe("the node's own network namespace as CNI_NETNS", () => {
  // The plugin runs in the node's netns (nsenter), so /proc/self/ns/net names it too;
  // /run/netns/<node> is a bind mount of it.
  const ownPaths = (node: string) => [`/run/netns/${node}`, "/proc/self/ns/net", "/proc/thread-self/ns/net"];

  it("is refused by ADD with code 4, before anything is made", () => {
    const [node] = makeCluster(fx);
    const linksBefore = inNs(node.netns, "ip", ["-o", "link", "show"]);
    const dataDir = (node.conf.ipam as { dataDir: string }).dataDir;
    for (const netns of ownPaths(node.netns)) {
      const r = runPlugin(node.netns, "ADD", { containerId: "hostns", netns, ifname: "eth0" }, node.conf);
      expect(r.json, netns).toMatchObject({ code: 4 });
      expect(String(r.json?.msg)).toBe(`CNI_NETNS ${netns} is the node's own network namespace, not a pod's`);
    }
    expect(inNs(node.netns, "ip", ["-o", "link", "show"])).toBe(linksBefore);
    expect(walk(path.join(dataDir, "cluster")).filter((p) => /\d+\.\d+\.\d+\.\d+$/.test(p))).toEqual([]);
  });

  it("is refused by CHECK with code 4", () => {
    const [node] = makeCluster(fx);
    const pod = fx.makeNetns("nkp");
    const att = { containerId: "hostns", ifname: "eth0" };
    const added = runPlugin(node.netns, "ADD", { ...att, netns: `/run/netns/${pod}` }, node.conf);
    expect(added.status, added.stdout).toBe(0);
    for (const netns of ownPaths(node.netns)) {
      const r = runPlugin(node.netns, "CHECK", { ...att, netns }, { ...node.conf, prevResult: added.json });
      expect(r.json, netns).toMatchObject({ code: 4 });
      expect(String(r.json?.msg)).toBe(`CNI_NETNS ${netns} is the node's own network namespace, not a pod's`);
    }
  });

  it("is no pod's to DEL: the node's rules stay, the attachment's device goes", () => {
    const [node] = makeCluster(fx);
    const pod = fx.makeNetns("nkp");
    const att = { containerId: "hostns", ifname: "wire0" };
    const added = runPlugin(node.netns, "ADD", { ...att, netns: `/run/netns/${pod}` }, node.conf);
    expect(added.status, added.stdout).toBe(0);
    // The node as DEL would see it were it the pod: a host address on "wire0", and the
    // source rule a second interface of that name would have had.
    const ifindex = JSON.parse(inNs(node.netns, "ip", ["-j", "link", "show", "wire0"]))[0].ifindex as number;
    inNs(node.netns, "ip", ["addr", "add", "10.220.9.9/32", "dev", "wire0"]);
    const table = `${10_000 + ifindex}`;
    inNs(node.netns, "ip", ["rule", "add", "from", "10.220.9.9", "lookup", table, "priority", table]);
    const rules = inNs(node.netns, "ip", ["rule", "show"]);
    expect(rules).toContain("from 10.220.9.9 lookup");
    const r = runPlugin(node.netns, "DEL", { ...att, netns: `/run/netns/${node.netns}` }, node.conf);
    expect(r.status, r.stdout).toBe(0);
    expect(inNs(node.netns, "ip", ["rule", "show"])).toBe(rules);
    expect(pluginLinks(node.netns)).toEqual([]);
  });
});

describe("the log", () => {
  // Text that would pass for a record of its own if its line break were written as is.
  const FORGED = "\n2000-01-01T00:00:00.000Z INFO [1] ADD forged/eth0 added veth nk0 <-> eth0";
  const ID = `c\r\u001b[2K${FORGED}\u2028x\\`;

  it("keeps one line per record whatever STATUS, ADD and DEL are sent", () => {
    const [node] = makeCluster(fx);
    const logFile = node.conf.logFile as string;
    const pod = fx.makeNetns("nkp");
    const runs = [
      runPlugin(node.netns, "STATUS", { containerId: ID }, node.conf),
      runPlugin(node.netns, "ADD", { containerId: ID, netns: `/run/netns/${pod}`, ifname: "eth0" }, node.conf),
      runPlugin(node.netns, "DEL", { containerId: ID, netns: `/run/netns/${pod}`, ifname: "eth0" }, node.conf),
      // Accepted as it is: a netns path is any absolute path, and the error quotes it.
      runPlugin(
        node.netns,
        "ADD",
        { containerId: "c1", netns: `/run/netns/absent${FORGED}`, ifname: "eth0" },
        node.conf,
      ),
    ];
    expect(runs.map((r) => r.status)).toEqual([0, 1, 1, 1]);
    expect(runs.slice(1).map((r) => r.json?.code)).toEqual([4, 4, 4]);

    const lines = fs.readFileSync(logFile, "utf8").split("\n");
    expect(lines.pop()).toBe("");
    for (const line of lines) expect(line).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z (ERROR|WARN|INFO|DEBUG) \[\d+\] \S/);
    expect(lines.filter((l) => l.startsWith("2000-01-01"))).toEqual([]);
    const escapedId =
      "c\\r\\u001b[2K\\n2000-01-01T00:00:00.000Z INFO [1] ADD forged/eth0 added veth nk0 <-> eth0\\u2028x\\\\";
    // STATUS reports, and the refusals of ADD and DEL are on record, each on its line.
    expect(lines.filter((l) => l.includes(`INFO [`) && l.includes(`STATUS ${escapedId}/ ready`))).toHaveLength(1);
    for (const verb of ["ADD", "DEL"]) {
      const refusal = lines.filter(
        (l) => l.includes(`ERROR [`) && l.includes(`${verb} ${escapedId}/eth0 CNI_CONTAINERID`),
      );
      expect(refusal, verb).toHaveLength(1);
    }
    expect(lines.filter((l) => l.includes("ERROR [") && l.includes("/run/netns/absent\\n2000-01-01T"))).toHaveLength(1);
  });
});
