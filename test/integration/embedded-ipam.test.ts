/**
 * The embedded IPAM (`ipam.type: "netkit-cni"`) through the executable: addresses come
 * from our own host-local compatible store, with no other binary exec'd.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { useTestNode } from "../support/fixtures";
import { type Fixture, ping, pluginLinks, runPlugin, TEST_DATAPATH } from "../support/harness";

let fx: Fixture;
let node: string;
let dataDir: string;

useTestNode({ v4: "10.213.255.1", v6: "fd10:213::1", dataDirPrefix: "nkt-emb-" }, (test) => {
  ({ fx, node, dataDir } = test);
});

function conf(ranges: unknown[]): Record<string, unknown> {
  return {
    cniVersion: "1.1.0",
    name: "embnet",
    type: "netkit-cni",
    datapath: TEST_DATAPATH,
    logFile: path.join(dataDir, "plugin.log"),
    ipam: { type: "netkit-cni", ranges, dataDir },
    bpffsRoot: fx.bpffsRoot,
    hostInterface: "uplink0",
  };
}

const storeFiles = () => {
  const dir = path.join(dataDir, "embnet");
  return fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => /^[0-9a-f.:]+$/.test(f) && /[.:]/.test(f)) : [];
};

describe("embedded IPAM", () => {
  it("allocates dual-stack addresses in the host-local store format and releases them on DEL", () => {
    const c = conf([[{ subnet: "10.213.0.0/24" }], [{ subnet: "fd10:213:0:1::/64" }]]);
    const pod = fx.makeNetns();
    const att = { containerId: "emb1", netns: `/run/netns/${pod}`, ifname: "eth0" };
    const a = runPlugin(node, "ADD", att, c);
    expect(a.status, a.stdout).toBe(0);
    const ips = ((a.json?.ips ?? []) as { address: string }[]).map((i) => i.address);
    expect(ips).toEqual(["10.213.0.2/32", "fd10:213:0:1::2/128"]);
    expect(storeFiles().sort()).toEqual(["10.213.0.2", "fd10:213:0:1::2"]);
    expect(fs.readFileSync(path.join(dataDir, "embnet", "10.213.0.2"), "utf8")).toBe("emb1\r\neth0");
    expect(ping(node, "10.213.0.2")).toBe(true);
    expect(ping(node, "fd10:213:0:1::2")).toBe(true);

    expect(runPlugin(node, "CHECK", att, { ...c, prevResult: a.json }).status).toBe(0);
    expect(runPlugin(node, "DEL", att, c).status).toBe(0);
    expect(runPlugin(node, "DEL", att, c).status).toBe(0);
    expect(storeFiles()).toEqual([]);
    expect(pluginLinks(node)).toEqual([]);
  });

  it("reports an exhausted range: ADD fails with code 50 leaving nothing, STATUS says not ready", () => {
    const c = conf([[{ subnet: "10.213.1.0/30" }]]); // one usable address: .2
    const first = runPlugin(
      node,
      "ADD",
      { containerId: "only", netns: `/run/netns/${fx.makeNetns()}`, ifname: "eth0" },
      c,
    );
    expect(first.status, first.stdout).toBe(0);
    expect(runPlugin(node, "STATUS", {}, c).json).toMatchObject({ code: 50 });

    const pod = fx.makeNetns();
    const second = runPlugin(node, "ADD", { containerId: "more", netns: `/run/netns/${pod}`, ifname: "eth0" }, c);
    expect(second.status).toBe(1);
    expect(second.json).toMatchObject({ code: 50 });
    expect(String(second.json?.msg)).toContain("no IP addresses available in range set");
    expect(pluginLinks(node)).toHaveLength(1);
    expect(storeFiles()).toEqual(["10.213.1.2"]);
  });

  it("GC releases the addresses and devices of attachments no longer listed", () => {
    const c = conf([[{ subnet: "10.213.2.0/24" }]]);
    for (const id of ["live", "dead"]) {
      const r = runPlugin(node, "ADD", { containerId: id, netns: `/run/netns/${fx.makeNetns()}`, ifname: "eth0" }, c);
      expect(r.status, r.stdout).toBe(0);
    }
    const gc = runPlugin(
      node,
      "GC",
      {},
      { ...c, "cni.dev/valid-attachments": [{ containerID: "live", ifname: "eth0" }] },
    );
    expect(gc.status, gc.stdout).toBe(0);
    expect(storeFiles()).toEqual(["10.213.2.2"]);
    expect(pluginLinks(node)).toHaveLength(1);
  });
});
