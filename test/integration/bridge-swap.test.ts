/**
 * Swapping netkit-cni in for the reference `bridge` plugin on a live node: two pods of
 * the bridge (cni0, the gateway address, the whole subnet on-link in the pods), then
 * `netkit-cni install` for the same network name and store, then two pods of ours. Old
 * and new pods reach each other both ways over IPv4 and IPv6 (the node answers ARP/ND
 * for ours on cni0), the node reaches all of them and they reach it, a runtime's DEL of
 * an old pod through our plugin releases its address, and when our last pod is gone
 * nothing of ours is left on cni0. Also: proxy_ndp that was on before us stays on, GC
 * and a pod lost without DEL, and concurrent ADDs and DELs leave exactly the live pods'
 * entries. Everything lives in a node netns of the test's own.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { PROXY_PROTOCOL, PROXY_PROTOCOL_NDP_SET } from "../../src/datapath/coexist-plan";
import { useTestNode } from "../support/fixtures";
import {
  BINARY,
  CNI_PATH,
  type Fixture,
  inNs,
  type PluginRun,
  ping,
  runPlugin,
  runPluginAsync,
  TEST_DATAPATH,
  withPluginBinary,
} from "../support/harness";

const NETWORK = "podnet";
const SUBNET4 = "10.231.90.0/24";
const SUBNET6 = "fd31:90::/64";
const NODE4 = "10.230.0.1";
const NODE6 = "fd30::1";
const BRIDGE = path.join(CNI_PATH, "bridge");

interface Pod {
  netns: string;
  containerId: string;
  v4: string;
  v6: string;
  add: PluginRun;
}

let fx: Fixture;
let node: string;
let dataDir: string;

useTestNode({ v4: NODE4, v6: NODE6, dataDirPrefix: "nkt-swap-" }, (test) => {
  ({ fx, node, dataDir } = test);
});

/** The reference bridge as a node would have it before the swap (isGateway, host-local). */
const bridgeConf = {
  cniVersion: "1.0.0",
  name: NETWORK,
  type: "bridge",
  bridge: "cni0",
  isGateway: true,
  ipMasq: false,
  get ipam() {
    return {
      type: "host-local",
      ranges: [[{ subnet: SUBNET4 }], [{ subnet: SUBNET6 }]],
      routes: [{ dst: "0.0.0.0/0" }, { dst: "::/0" }],
      dataDir,
    };
  },
};

/** Our plugin's config as `install` writes it for this node, as a runtime hands it over. */
function installedConf(): Record<string, unknown> {
  const confDir = fx.tempDir("nkt-swap-conf-");
  const { ipam, ...bridgePlugin } = bridgeConf;
  const bridgeList = { cniVersion: "1.0.0", name: NETWORK, plugins: [{ ...bridgePlugin, ipam }] };
  fs.writeFileSync(path.join(confDir, "10-bridge.conflist"), JSON.stringify(bridgeList));
  const r = spawnSync(
    BINARY,
    [
      "install",
      "--skip-binary",
      "--json",
      ...["--bin-dir", confDir, "--conf-dir", confDir],
      ...["--network-name", NETWORK, "--data-dir", dataDir, "--pod-cidr", `${SUBNET4},${SUBNET6}`],
      ...["--datapath", TEST_DATAPATH, "--host-interface", "uplink0", "--bpffs-root", fx.bpffsRoot],
      ...["--log-file", path.join(dataDir, "plugin.log")],
    ],
    { encoding: "utf8" },
  );
  if (r.status !== 0) throw new Error(`install failed: ${r.stdout}${r.stderr}`);
  const report = JSON.parse(r.stdout) as { conflist: { path: string }; found: { file: string }[]; warnings: string[] };
  expect(report.found.map((f) => f.file)).toEqual(["10-bridge.conflist"]);
  expect(report.warnings).toEqual([]);
  const { conflist } = report;
  expect(path.basename(conflist.path)).toBe("00-netkit-cni.conflist");
  const list = JSON.parse(fs.readFileSync(conflist.path, "utf8")) as { name: string; plugins: object[] };
  return { ...list.plugins[0], name: list.name, cniVersion: "1.0.0" };
}

function addPod(conf: Record<string, unknown>, containerId: string, binary = BINARY): Pod {
  const netns = fx.makeNetns("nkp");
  const att = { containerId, netns: `/run/netns/${netns}`, ifname: "eth0" };
  const add = withPluginBinary(binary, () => runPlugin(node, "ADD", att, conf));
  if (add.status !== 0) throw new Error(`ADD ${containerId} failed: ${add.stdout}`);
  const ips = ((add.json?.ips ?? []) as { address: string }[]).map((i) => i.address.split("/")[0] ?? "");
  return {
    netns,
    containerId,
    v4: ips.find((a) => !a.includes(":")) ?? "",
    v6: ips.find((a) => a.includes(":")) ?? "",
    add,
  };
}

/** A runtime's DEL with the node's current config and the pod's cached result. */
function delPod(conf: Record<string, unknown>, pod: Pod): PluginRun {
  const att = { containerId: pod.containerId, netns: `/run/netns/${pod.netns}`, ifname: "eth0" };
  return runPlugin(node, "DEL", att, { ...conf, prevResult: pod.add.json });
}

/** Ping, allowing for first contact: proxy answers to broadcast/multicast wait up to proxy_delay (0.8 s). */
function reaches(netns: string, address: string): boolean {
  for (let i = 0; i < 4; i++) if (ping(netns, address)) return true;
  return false;
}

const reserved = () =>
  fs.readdirSync(path.join(dataDir, NETWORK)).filter((f) => /^[0-9a-f.:]+$/.test(f) && /[.:]/.test(f));

/** Proxy entries on a device of the node: "address protocol". */
function proxies(device: string): string[] {
  const rows = JSON.parse(inNs(node, "ip", ["-j", "neigh", "show", "proxy", "dev", device]) || "[]") as {
    dst: string;
    protocol?: string | number;
  }[];
  return rows.map((r) => `${r.dst} ${r.protocol ?? ""}`.trim()).sort();
}
const sysctl = (key: string) => inNs(node, "sysctl", ["-n", key]).trim();

describe("replacing the bridge plugin on a live node", () => {
  it("old and new pods reach each other both ways; DEL of an old pod releases it; nothing of ours stays on cni0", () => {
    const oldPods = [addPod(bridgeConf, "old-1", BRIDGE), addPod(bridgeConf, "old-2", BRIDGE)];
    const ours = installedConf();
    const newPods = [addPod(ours, "new-1"), addPod(ours, "new-2")];
    const all = [...oldPods, ...newPods];

    // One store: disjoint addresses, all in the bridge's subnets.
    const addresses = all.flatMap((p) => [p.v4, p.v6]);
    expect(new Set(addresses).size).toBe(8);
    expect(reserved().sort()).toEqual([...addresses].sort());

    // The node answers for our pods on cni0 only, and marks the entries as ours.
    const v6Mark = (protocol: number) => String(protocol);
    expect(proxies("cni0")).toEqual(
      newPods.flatMap((p) => [`${p.v4} ${PROXY_PROTOCOL}`, `${p.v6} ${v6Mark(PROXY_PROTOCOL_NDP_SET)}`]).sort(),
    );
    expect(proxies("uplink0")).toEqual([]);
    expect(sysctl("net.ipv6.conf.cni0.proxy_ndp")).toBe("1");
    expect(sysctl("net.ipv4.conf.cni0.proxy_arp")).toBe("0");
    expect(sysctl("net.ipv6.conf.uplink0.proxy_ndp")).toBe("0");
    // `netkit-cni status` shows it.
    const status = spawnSync("nsenter", [`--net=/run/netns/${node}`, BINARY, "status", "--bpffs-root", fx.bpffsRoot], {
      encoding: "utf8",
    });
    const shared = status.stdout.split("\n").find((l) => l.startsWith("shared subnet"));
    expect(shared, status.stdout).toMatch(/^shared subnet +cni0: answering ARP\/ND for /);
    for (const a of newPods.flatMap((p) => [p.v4, p.v6])) expect(shared).toContain(a);

    for (const from of oldPods) {
      for (const to of newPods) {
        for (const [a, b] of [
          [from, to],
          [to, from],
        ] as const) {
          expect(reaches(a.netns, b.v4), `${a.containerId} -> ${b.containerId} ${b.v4}`).toBe(true);
          expect(reaches(a.netns, b.v6), `${a.containerId} -> ${b.containerId} ${b.v6}`).toBe(true);
        }
      }
    }
    for (const pod of all) {
      expect(reaches(node, pod.v4), `node -> ${pod.v4}`).toBe(true);
      expect(reaches(node, pod.v6), `node -> ${pod.v6}`).toBe(true);
      expect(reaches(pod.netns, NODE4), `${pod.containerId} -> node`).toBe(true);
      expect(reaches(pod.netns, NODE6), `${pod.containerId} -> node v6`).toBe(true);
    }

    // The runtime deletes an old pod with the node's config, which is ours now.
    const [old1, old2] = oldPods as [Pod, Pod];
    const del = delPod(ours, old1);
    expect(del.status, del.stdout).toBe(0);
    expect(reserved()).not.toContain(old1.v4);
    expect(reserved()).not.toContain(old1.v6);
    expect(delPod(ours, old1).status).toBe(0);
    fx.deleteNetns(old1.netns);

    // Our pods go; the last one takes everything of ours off cni0.
    const [new1, new2] = newPods as [Pod, Pod];
    expect(delPod(ours, new1).status).toBe(0);
    expect(proxies("cni0")).toEqual([`${new2.v4} ${PROXY_PROTOCOL}`, `${new2.v6} ${PROXY_PROTOCOL_NDP_SET}`].sort());
    expect(delPod(ours, new2).status).toBe(0);
    expect(proxies("cni0")).toEqual([]);
    expect(sysctl("net.ipv6.conf.cni0.proxy_ndp")).toBe("0");
    expect(sysctl("net.ipv4.conf.cni0.proxy_arp")).toBe("0");
    // The remaining old pod is as the bridge left it.
    expect(reaches(node, old2.v4)).toBe(true);
    expect(reaches(node, old2.v6)).toBe(true);
    expect(reserved().sort()).toEqual([old2.v4, old2.v6].sort());
  });

  it("leaves proxy_ndp on when it was on before, and GC withdraws a lost pod's entries", () => {
    const old = addPod(bridgeConf, "old-1", BRIDGE);
    inNs(node, "sysctl", ["-qw", "net.ipv6.conf.cni0.proxy_ndp=1"]);
    const ours = installedConf();
    const pod = addPod(ours, "new-1");
    expect(proxies("cni0")).toEqual([`${pod.v4} ${PROXY_PROTOCOL}`, `${pod.v6} ${PROXY_PROTOCOL}`].sort());
    expect(reaches(old.netns, pod.v6)).toBe(true);
    expect(reaches(pod.netns, old.v4)).toBe(true);

    // The runtime still knows the old pod; ours was lost without a DEL.
    const valid = [{ containerID: old.containerId, ifname: "eth0" }];
    const gc = runPlugin(node, "GC", {}, { ...ours, cniVersion: "1.1.0", "cni.dev/valid-attachments": valid });
    expect(gc.status, gc.stdout).toBe(0);
    expect(proxies("cni0")).toEqual([]);
    expect(sysctl("net.ipv6.conf.cni0.proxy_ndp")).toBe("1");
    expect(reserved().sort()).toEqual([old.v4, old.v6].sort());
  });

  it("keeps exactly the live pods' entries through concurrent ADDs and DELs and a pod lost without DEL", async () => {
    addPod(bridgeConf, "old-1", BRIDGE);
    const ours = installedConf();
    const pods = Array.from({ length: 8 }, (_, i) => ({ containerId: `c${i}`, netns: fx.makeNetns("nkp") }));
    const att = (p: { containerId: string; netns: string }) => ({
      containerId: p.containerId,
      netns: `/run/netns/${p.netns}`,
      ifname: "eth0",
    });
    const adds = await Promise.all(pods.map((p) => runPluginAsync(node, "ADD", att(p), ours)));
    for (const a of adds) expect(a.status, a.stdout).toBe(0);
    const addressesOf = (a: PluginRun) =>
      ((a.json?.ips ?? []) as { address: string }[]).map((i) => i.address.split("/")[0]);
    const all = adds.flatMap(addressesOf);
    expect(
      proxies("cni0")
        .map((p) => p.split(" ")[0])
        .sort(),
    ).toEqual([...all].sort());

    // Half go by DEL while the other half stay; one of those is then lost without a DEL
    // (its netns deleted takes its device and routes): the next ADD drops its entries.
    const dels = await Promise.all(pods.slice(0, 4).map((p) => runPluginAsync(node, "DEL", att(p), ours)));
    for (const d of dels) expect(d.status, d.stdout).toBe(0);
    const [lost, ...kept] = pods.slice(4) as [(typeof pods)[0], ...(typeof pods)[0][]];
    fx.deleteNetns(lost.netns);
    const late = addPod(ours, "late");
    const live = [...adds.slice(5).flatMap(addressesOf), late.v4, late.v6];
    expect(
      proxies("cni0")
        .map((p) => p.split(" ")[0])
        .sort(),
    ).toEqual(live.sort());

    await Promise.all(
      [...kept, { containerId: "late", netns: late.netns }].map((p) => runPluginAsync(node, "DEL", att(p), ours)),
    );
    expect(proxies("cni0")).toEqual([]);
    expect(sysctl("net.ipv6.conf.cni0.proxy_ndp")).toBe("0");
  });
});
