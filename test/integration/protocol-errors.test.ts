/**
 * What a runtime sees when it gets things wrong: the executable answers every bad input
 * with exit status 1, one error JSON on stdout with the spec's code and a readable
 * message, and creates nothing.
 */

import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { nodeLockPath } from "../../src/datapath/node-datapath";
import { useTestNode } from "../support/fixtures";
import { allocatedIps, type Fixture, inNs, pluginLinks, runPlugin, TEST_DATAPATH, vethConf } from "../support/harness";

let fx: Fixture;
let node: string;
let pod: string;
let dataDir: string;
let conf: Record<string, unknown>;

useTestNode({ v4: "10.211.255.1", v6: "fd10:211::1", dataDirPrefix: "nkt-err-" }, (test) => {
  ({ fx, node, dataDir } = test);
  pod = fx.makeNetns();
  conf = vethConf({
    subnet4: "10.211.0.0/24",
    dataDir,
    logFile: path.join(dataDir, "plugin.log"),
    bpffsRoot: fx.bpffsRoot,
  });
});

const UNMAKEABLE_ROOT = "/proc/netkit-cni-test";

afterEach(() => {
  // The plugin takes the node lock before it finds it cannot make that root; the lock
  // file (in /run) is not the fixture's.
  fs.rmSync(nodeLockPath(UNMAKEABLE_ROOT), { force: true });
});

const att = () => ({ containerId: "c-err", netns: `/run/netns/${pod}`, ifname: "eth0" });

interface BadInput {
  /** What is wrong, as the test's name. */
  what: string;
  verb?: string;
  env?: Partial<ReturnType<typeof att>>;
  extraEnv?: Record<string, string>;
  /** Config overrides, or the exact stdin text. */
  conf?: Record<string, unknown> | string;
  code: number;
  msg: RegExp;
}

const big = "x".repeat((1 << 20) + 10);
const prevWith = (address: string) => ({
  cniVersion: "1.1.0",
  interfaces: [{ name: "nk0000000000000" }, { name: "eth0", sandbox: "/x" }],
  ips: [{ address, interface: 1 }],
});

const CORPUS: BadInput[] = [
  // Undecodable stdin: code 6.
  { what: "empty stdin", conf: "", code: 6, msg: /no network configuration on stdin/ },
  { what: "whitespace only", conf: "  \n ", code: 6, msg: /no network configuration on stdin/ },
  { what: "truncated JSON", conf: '{"cniVersion":"1.1.0","name":', code: 6, msg: /not valid JSON/ },
  { what: "trailing garbage", conf: '{"cniVersion":"1.1.0"} x', code: 6, msg: /not valid JSON/ },
  { what: "a JSON number", conf: "42", code: 6, msg: /must be a JSON object/ },
  { what: "JSON null", conf: "null", code: 6, msg: /must be a JSON object/ },
  { what: "a JSON string", conf: '"netkit"', code: 6, msg: /must be a JSON object/ },
  { what: "over 1 MiB", conf: { padding: big }, code: 6, msg: /larger than 1048576 bytes/ },
  {
    what: "prevResult with a bad address",
    verb: "CHECK",
    conf: { prevResult: prevWith("10.0.0.1") },
    code: 6,
    msg: /prevResult\.ips\[0\]\.address/,
  },
  {
    what: "prevResult not an object",
    verb: "CHECK",
    conf: { prevResult: [1] },
    code: 6,
    msg: /prevResult must be a JSON object/,
  },
  // Versions: code 1.
  { what: "unsupported cniVersion", conf: { cniVersion: "0.2.0" }, code: 1, msg: /incompatible CNI versions/ },
  { what: "unknown future cniVersion", conf: { cniVersion: "2.0.0" }, code: 1, msg: /incompatible CNI versions/ },
  {
    what: "cniVersions with nothing in common",
    conf: { cniVersion: undefined, cniVersions: ["0.1.0"] },
    code: 1,
    msg: /incompatible/,
  },
  {
    what: "CHECK in 0.3.1",
    verb: "CHECK",
    conf: { cniVersion: "0.3.1" },
    code: 1,
    msg: /CHECK is not defined in CNI spec 0\.3\.1/,
  },
  { what: "GC in 1.0.0", verb: "GC", conf: { cniVersion: "1.0.0" }, code: 1, msg: /GC is not defined/ },
  { what: "STATUS in 0.4.0", verb: "STATUS", conf: { cniVersion: "0.4.0" }, code: 1, msg: /STATUS is not defined/ },
  // Environment: code 4.
  { what: "no CNI_COMMAND", verb: "", extraEnv: { CNI_COMMAND: "" }, code: 4, msg: /CNI_COMMAND is required/ },
  { what: "unknown verb", verb: "REBOOT", code: 4, msg: /CNI_COMMAND "REBOOT" is not one of/ },
  { what: "missing CNI_CONTAINERID", env: { containerId: "" }, code: 4, msg: /CNI_CONTAINERID is required/ },
  { what: "missing CNI_IFNAME", env: { ifname: "" }, code: 4, msg: /CNI_IFNAME is required/ },
  { what: "missing CNI_NETNS", env: { netns: "" }, code: 4, msg: /CNI_NETNS is required for ADD/ },
  { what: "missing CNI_PATH", extraEnv: { CNI_PATH: "" }, code: 4, msg: /CNI_PATH is required/ },
  { what: "ifname with a colon", env: { ifname: "eth0:1" }, code: 4, msg: /contains '\/', ':' or whitespace/ },
  { what: "ifname with a slash", env: { ifname: "a/b" }, code: 4, msg: /contains '\/'/ },
  { what: "ifname with a space", env: { ifname: "a b" }, code: 4, msg: /whitespace/ },
  { what: "ifname '..'", env: { ifname: ".." }, code: 4, msg: /not a valid interface name/ },
  { what: "16-character ifname", env: { ifname: "a-very-long-name" }, code: 4, msg: /longer than 15/ },
  // The kernel would make "net0" of it, and the pod's end would not be found by its name.
  { what: "ifname a name template", env: { ifname: "net%d" }, code: 4, msg: /CNI_IFNAME "net%d" contains '%'/ },
  { what: "ifname a bare template", env: { ifname: "%d" }, code: 4, msg: /CNI_IFNAME "%d" contains '%'/ },
  { what: "CHECK of a template", verb: "CHECK", env: { ifname: "eth%d" }, code: 4, msg: /contains '%'/ },
  {
    what: "path-like container ID",
    env: { containerId: "../../etc/passwd" },
    code: 4,
    msg: /CNI_CONTAINERID has invalid characters/,
  },
  { what: "container ID with a space", env: { containerId: "a b" }, code: 4, msg: /invalid characters/ },
  { what: "container ID starting with '-'", env: { containerId: "-rf" }, code: 4, msg: /invalid characters/ },
  {
    what: "overlong container ID",
    env: { containerId: "c".repeat(201) },
    code: 4,
    msg: /201 characters long; at most 200/,
  },
  { what: "relative CNI_NETNS", env: { netns: "netns/x" }, code: 4, msg: /not an absolute path/ },
  {
    what: "CNI_NETNS that does not exist",
    env: { netns: "/run/netns/absent-xyz" },
    code: 4,
    msg: /\/run\/netns\/absent-xyz: ENOENT/,
  },
  { what: "CNI_NETNS that is a plain file", env: { netns: "/etc/hostname" }, code: 4, msg: /not a network namespace/ },
  {
    what: "CNI_NETNS that is a mount namespace",
    env: { netns: "/proc/self/ns/mnt" },
    code: 4,
    msg: /not a network namespace/,
  },
  {
    what: "malformed CNI_ARGS",
    extraEnv: { CNI_ARGS: "K8S_POD_NAME" },
    code: 4,
    msg: /CNI_ARGS entry "K8S_POD_NAME" is not KEY=VALUE/,
  },
  // Configuration: code 7.
  { what: "missing cniVersion", conf: { cniVersion: undefined }, code: 7, msg: /cniVersion is missing/ },
  { what: "cniVersion a number", conf: { cniVersion: 1 }, code: 7, msg: /cniVersion must be a string/ },
  { what: "missing name", conf: { name: undefined }, code: 7, msg: /"name" is required/ },
  { what: "name with a slash", conf: { name: "a/b" }, code: 7, msg: /"name" "a\/b" must start with a letter or digit/ },
  { what: "name a number", conf: { name: 7 }, code: 7, msg: /"name" must be a string/ },
  { what: "missing type", conf: { type: undefined }, code: 7, msg: /"type" is required/ },
  {
    what: "unknown datapath",
    conf: { datapath: "ovs" },
    code: 7,
    msg: /"datapath" must be one of "auto", "netkit", "veth"/,
  },
  { what: "unknown netkit mode", conf: { mode: "l4" }, code: 7, msg: /"mode" must be one of/ },
  { what: "mtu too small", conf: { mtu: 100 }, code: 7, msg: /"mtu" must be an integer from 576 to 65535; got 100/ },
  { what: "mtu a string", conf: { mtu: "1500" }, code: 7, msg: /"mtu" must be an integer/ },
  { what: "fastPath not a boolean", conf: { fastPath: "yes" }, code: 7, msg: /"fastPath" must be true or false/ },
  { what: "relative bpffsRoot", conf: { bpffsRoot: "bpf" }, code: 7, msg: /"bpffsRoot" must be an absolute path/ },
  {
    what: "clusterCIDRs not CIDRs",
    conf: { clusterCIDRs: ["10.0.0.0"] },
    code: 7,
    msg: /"clusterCIDRs" must be a list of CIDRs/,
  },
  {
    what: "hostInterface that does not exist",
    conf: { hostInterface: "nope0" },
    code: 7,
    msg: /hostInterface "nope0" does not exist/,
  },
  { what: "bad log level", conf: { logLevel: "loud" }, code: 7, msg: /"logLevel" must be one of/ },
  { what: "missing ipam", conf: { ipam: undefined }, code: 7, msg: /"ipam" is required/ },
  { what: "ipam without type", conf: { ipam: { ranges: [] } }, code: 7, msg: /"ipam.type" is required/ },
  {
    what: "ipam type that is a path",
    conf: { ipam: { type: "../../bin/sh" } },
    code: 7,
    msg: /must be a plugin name, not a path/,
  },
  {
    what: "ipam plugin not in CNI_PATH",
    conf: { ipam: { type: "no-such-ipam" } },
    code: 7,
    msg: /failed to find plugin "no-such-ipam"/,
  },
  {
    what: "embedded ipam with a bad subnet",
    conf: { ipam: { type: "netkit-cni", ranges: [[{ subnet: "10.0.0.0/33" }]] } },
    code: 7,
    msg: /subnet/,
  },
  { what: "CHECK without prevResult", verb: "CHECK", code: 7, msg: /CHECK needs prevResult/ },
  { what: "GC without valid-attachments", verb: "GC", code: 7, msg: /GC needs "cni.dev\/valid-attachments"/ },
  {
    what: "valid-attachments of the wrong shape",
    verb: "GC",
    conf: { "cni.dev/valid-attachments": [{ containerID: 1 }] },
    code: 7,
    msg: /must have string "containerID" and "ifname"/,
  },
  // The node cannot serve: code 50 / plugin codes.
  { what: "netkit requested on a kernel without it", conf: { datapath: "netkit" }, code: 50, msg: /CONFIG_NETKIT/ },
  {
    what: "bpffs root that cannot be made",
    conf: { bpffsRoot: UNMAKEABLE_ROOT },
    code: 5,
    msg: /\/proc\/netkit-cni-test/,
  },
];

const hasNetkit =
  spawnSync("sh", [
    "-c",
    "ip netns add nkkprobe && ip -n nkkprobe link add nk0 type netkit peer name nk1; r=$?; ip netns del nkkprobe; exit $r",
  ]).status === 0;

describe(`bad input corpus (${CORPUS.length} cases)`, () => {
  // On a kernel with netkit, "datapath": "netkit" is not bad input (datapath-choice tests it).
  const cases = CORPUS.filter((c) => !(hasNetkit && c.what.startsWith("netkit requested")));
  it.each(cases)("$what → code $code", ({ verb = "ADD", env = {}, extraEnv = {}, conf: override = {}, code, msg }) => {
    const stdin = typeof override === "string" ? override : { ...conf, ...override };
    // What a new namespace has before anything runs: lo, and on some kernels their
    // fallback tunnel devices (sit0 and the like, made in every namespace).
    const podLinks = () => inNs(pod, "ip", ["-o", "link", "show"]).trim().split("\n");
    const fresh = podLinks();
    const r = runPlugin(node, verb, { ...att(), ...env }, stdin, extraEnv);
    expect(r.status).toBe(1);
    expect(r.json, r.stdout).toMatchObject({ code });
    expect(String(r.json?.msg)).toMatch(msg);
    expect(r.stdout.trim().split("\n")).toHaveLength(1);
    // Nothing made: no device (on the node or in the pod), no reservation, no pins.
    expect(pluginLinks(node)).toEqual([]);
    expect(podLinks()).toEqual(fresh);
    expect(allocatedIps(dataDir)).toEqual([]);
    expect(
      fs.existsSync(path.join(fx.bpffsRoot, "endpoints")) ? fs.readdirSync(path.join(fx.bpffsRoot, "endpoints")) : [],
    ).toEqual([]);
  });

  it.each(["net%d", "a/b", "eth 0", "a-very-long-name"])(
    "DEL of an interface name ADD refuses (%j) succeeds: there is nothing to delete",
    (ifname) => {
      const r = runPlugin(node, "DEL", { ...att(), ifname }, conf);
      expect(r.status, r.stdout).toBe(0);
      expect(r.stdout).toBe("");
    },
  );

  it("has at least 40 cases", () => {
    expect(CORPUS.length).toBeGreaterThanOrEqual(40);
  });

  it("a prevResult naming an address the pod does not have fails CHECK with code 101", () => {
    const added = runPlugin(node, "ADD", att(), conf);
    expect(added.status, added.stdout).toBe(0);
    const r = runPlugin(node, "CHECK", att(), { ...conf, prevResult: prevWith("10.211.0.200/32") });
    expect(r.json).toMatchObject({ code: 101 });
    expect(String(r.json?.msg)).toMatch(/10\.211\.0\.200/);
  });

  it("answers undecodable stdin with code 6, in the latest version", () => {
    const r = runPlugin(node, "ADD", att(), "{not json");
    expect(r.status).toBe(1);
    expect(r.json).toMatchObject({ cniVersion: "1.1.0", code: 6, msg: "network configuration is not valid JSON" });
  });

  it("renders errors in the config's version", () => {
    const r = runPlugin(node, "ADD", { ...att(), ifname: "" }, { ...conf, cniVersion: "0.4.0" });
    expect(r.json).toMatchObject({ cniVersion: "0.4.0", code: 4 });
  });

  it("STATUS reports code 50 when the IPAM plugin cannot be run", () => {
    const r = runPlugin(node, "STATUS", {}, { ...conf, ipam: { type: "no-such-ipam" } });
    expect(r.status).toBe(1);
    expect(r.json).toMatchObject({ code: 50 });
    expect(String(r.json?.msg)).toContain("no-such-ipam");
  });
});

describe("diagnostics", () => {
  it("go to the log file (0600), never to stdout", () => {
    const r = runPlugin(node, "ADD", att(), conf);
    expect(r.status, r.stdout).toBe(0);
    expect(JSON.parse(r.stdout).ips).toHaveLength(1);
    const logFile = path.join(dataDir, "plugin.log");
    expect(fs.statSync(logFile).mode & 0o777).toBe(0o600);
    const text = fs.readFileSync(logFile, "utf8");
    expect(text).toMatch(
      new RegExp(`INFO .*ADD c-err/eth0 added ${TEST_DATAPATH} nk[0-9a-f]{13} <-> eth0 with 10\\.211\\.0\\.\\d+/24`),
    );
    const bad = runPlugin(node, "ADD", { ...att(), containerId: "c-err2", netns: "/run/netns/absent" }, conf);
    expect(bad.status).toBe(1);
    expect(fs.readFileSync(logFile, "utf8")).toMatch(/ERROR .*CNI_NETNS: network namespace \/run\/netns\/absent/);
  });

  it("the log level filters what is written", () => {
    const logFile = path.join(dataDir, "quiet.log");
    runPlugin(node, "ADD", att(), { ...conf, logFile, logLevel: "error" });
    expect(fs.existsSync(logFile) ? fs.readFileSync(logFile, "utf8") : "").toBe("");
  });
});
