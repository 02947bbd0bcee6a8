/**
 * What a runtime sees when it gets things wrong: the executable answers every bad input
 * with exit status 1, one error JSON on stdout with the spec's code and a readable
 * message, and creates nothing.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { allocatedIps, Fixture, pluginLinks, runPlugin, TEST_DATAPATH, vethConf } from "./harness";

let fx: Fixture;
let node: string;
let pod: string;
let dataDir: string;
let conf: Record<string, unknown>;

beforeEach(() => {
  fx = new Fixture();
  node = fx.makeNode("10.211.255.1", "fd10:211::1");
  pod = fx.makeNetns();
  dataDir = fx.tempDir("nkt-err-");
  conf = vethConf({
    subnet4: "10.211.0.0/24",
    dataDir,
    logFile: path.join(dataDir, "plugin.log"),
    bpffsRoot: fx.bpffsRoot,
  });
});

afterEach(() => fx.cleanup());

const att = () => ({ containerId: "c-err", netns: `/run/netns/${pod}`, ifname: "eth0" });

describe("bad input", () => {
  it.each([
    ["no CNI_COMMAND", "", {}, {}, 4, /CNI_COMMAND is required/],
    ["unknown verb", "REBOOT", {}, {}, 4, /not one of/],
    ["bad ifname", "ADD", { ifname: "eth0:1" }, {}, 4, /contains '\/', ':' or whitespace/],
    ["overlong ifname", "ADD", { ifname: "a-very-long-name0" }, {}, 4, /longer than 15/],
    ["path-like container ID", "ADD", { containerId: "../../etc" }, {}, 4, /invalid characters/],
    ["relative netns", "ADD", { netns: "netns/x" }, {}, 4, /not an absolute path/],
    ["netns that is a plain file", "ADD", { netns: "/etc/hostname" }, {}, 4, /not a network namespace/],
    ["unsupported version", "ADD", {}, { cniVersion: "0.2.0" }, 1, /incompatible CNI versions/],
    ["CHECK in 0.3.1", "CHECK", {}, { cniVersion: "0.3.1" }, 1, /CHECK is not defined/],
    ["missing ipam", "ADD", {}, { ipam: undefined }, 7, /"ipam" is required/],
    ["ipam plugin not found", "ADD", {}, { ipam: { type: "no-such-ipam" } }, 7, /failed to find plugin/],
    ["bad datapath", "ADD", {}, { datapath: "ovs" }, 7, /"datapath" must be one of/],
    ["CHECK without prevResult", "CHECK", {}, {}, 7, /CHECK needs prevResult/],
  ])("%s", (_what, verb, envOverride, confOverride, code, msg) => {
    const r = runPlugin(
      node,
      verb,
      { ...att(), ...envOverride },
      { ...conf, ...confOverride },
      verb === "" ? { CNI_COMMAND: "" } : {},
    );
    expect(r.status).toBe(1);
    expect(r.json).toMatchObject({ code });
    expect(String(r.json?.msg)).toMatch(msg);
    expect(r.stdout.trim().split("\n")).toHaveLength(1);
    expect(pluginLinks(node)).toEqual([]);
    expect(allocatedIps(dataDir)).toEqual([]);
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
