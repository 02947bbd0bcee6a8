/**
 * Which device kind a pod gets, on whatever kernel this runs: netkit where the kernel has
 * it, and on kernels without it a clear refusal for "netkit" and a veth pod for "auto".
 * The suite runs on both kinds of kernel (this machine's, and the netkit VM), so each
 * branch below is exercised by one of them.
 */
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { useTestNode } from "../support/fixtures";
import {
  allocatedIps,
  type Fixture,
  inNs,
  kernelHasNetkit,
  ping,
  pluginLinks,
  runPlugin,
  vethConf,
} from "../support/harness";

let fx: Fixture;
let node: string;
let conf: Record<string, unknown>;
let dataDir: string;

useTestNode({ v4: "10.214.255.1", v6: "fd10:214::1", dataDirPrefix: "nkt-dp-" }, (test) => {
  ({ fx, node, dataDir } = test);
  conf = vethConf({
    bpffsRoot: fx.bpffsRoot,
    subnet4: "10.214.0.0/24",
    dataDir,
    logFile: path.join(dataDir, "plugin.log"),
  });
});

const kindOf = (dev: string) =>
  (JSON.parse(inNs(node, "ip", ["-d", "-j", "link", "show", "dev", dev])) as { linkinfo?: { info_kind?: string } }[])[0]
    ?.linkinfo?.info_kind;

describe("datapath choice", () => {
  it('"auto" gives a netkit pod where the kernel has netkit, else a veth pod', () => {
    const hasNetkit = kernelHasNetkit(fx);
    const pod = fx.makeNetns();
    const r = runPlugin(
      node,
      "ADD",
      { containerId: "auto1", netns: `/run/netns/${pod}`, ifname: "eth0" },
      { ...conf, datapath: "auto" },
    );
    expect(r.status, r.stdout).toBe(0);
    const dev = ((r.json?.interfaces ?? []) as { name: string }[])[0]?.name ?? "";
    expect(kindOf(dev)).toBe(hasNetkit ? "netkit" : "veth");
    expect(ping(node, "10.214.0.2")).toBe(true);
  });

  it('"netkit" works where the kernel has it, and elsewhere fails naming the missing feature, leaving nothing', () => {
    const hasNetkit = kernelHasNetkit(fx);
    const pod = fx.makeNetns();
    const r = runPlugin(
      node,
      "ADD",
      { containerId: "nk1", netns: `/run/netns/${pod}`, ifname: "eth0" },
      { ...conf, datapath: "netkit" },
    );
    if (hasNetkit) {
      expect(r.status, r.stdout).toBe(0);
      expect(kindOf(((r.json?.interfaces ?? []) as { name: string }[])[0]?.name ?? "")).toBe("netkit");
      return;
    }
    expect(r.status).toBe(1);
    expect(r.json).toMatchObject({ code: 50 });
    expect(String(r.json?.msg)).toContain("CONFIG_NETKIT");
    expect(pluginLinks(node)).toEqual([]);
    expect(allocatedIps(dataDir)).toEqual([]);
    const status = runPlugin(node, "STATUS", {}, { ...conf, datapath: "netkit" });
    expect(status.json).toMatchObject({ code: 50 });
  });
});
