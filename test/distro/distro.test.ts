/**
 * The kernel most nodes run: Debian's packaged 6.12 (the qemu guest, `make
 * test-vm-distro`), with netkit built in, a BPF JIT, and nf_conntrack loaded as kube-proxy
 * leaves a node. There `natCheck: "auto"` must pick the conntrack kfunc, and the flows
 * that conntrack translates must keep taking the stack: a Service as kube-proxy's iptables
 * rules write it, a hostPort as the portmap plugin writes it, masquerade to a host outside
 * the cluster. Few process starts: every one costs seconds under emulation.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import { describe, expect, it } from "vitest";
import type { NodeStatus } from "../../src/cli/status";
import { startServer, tcpRequest } from "../integration/tcp";
import { useCluster } from "../support/fixtures";
import { BINARY, CNI_PATH, type Fixture, inNs, TEST_DATAPATH } from "../support/harness";
import { addPod, CLUSTER_CIDRS, type ClusterNode, counterDelta, type Pod } from "../support/topology";

const VIP = "10.96.0.10";
/** A host outside the cluster, reached through node A's second link (TEST-NET-1). */
const OUTSIDE = { node: "192.0.2.1", host: "192.0.2.2" };
const HOST_PORT = 30080;
const POD_PORT = 8080;

let fx: Fixture;
let a: ClusterNode;
let b: ClusterNode;

useCluster((cluster) => {
  ({ fx, a, b } = cluster);
});

function status(node: ClusterNode): NodeStatus {
  const r = spawnSync(
    "nsenter",
    [`--net=/run/netns/${node.netns}`, BINARY, "status", "--json", "--bpffs-root", node.bpffsRoot],
    { encoding: "utf8" },
  );
  return JSON.parse(r.stdout) as NodeStatus;
}

/**
 * A ClusterIP Service in the rules kube-proxy's iptables mode writes for it (one endpoint:
 * no statistic match), on `node`: the portal chains, the mark-for-masquerade dance and the
 * DNAT to the endpoint.
 */
function kubeProxyService(node: ClusterNode, backend: Pod): void {
  const svc = `-d ${VIP}/32 -p tcp -m comment --comment "default/distro cluster IP" -m tcp --dport 80`;
  const rules = [
    "*nat",
    ":KUBE-SERVICES - [0:0]",
    ":KUBE-POSTROUTING - [0:0]",
    ":KUBE-MARK-MASQ - [0:0]",
    ":KUBE-SVC-DISTRO - [0:0]",
    ":KUBE-SEP-DISTRO - [0:0]",
    '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
    "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
    "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
    "-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0",
    '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
    `-A KUBE-SERVICES ${svc} -j KUBE-SVC-DISTRO`,
    `-A KUBE-SVC-DISTRO ! -s ${CLUSTER_CIDRS[0]} ${svc} -j KUBE-MARK-MASQ`,
    '-A KUBE-SVC-DISTRO -m comment --comment "default/distro -> backend" -j KUBE-SEP-DISTRO',
    `-A KUBE-SEP-DISTRO -s ${backend.v4}/32 -m comment --comment default/distro -j KUBE-MARK-MASQ`,
    `-A KUBE-SEP-DISTRO -p tcp -m comment --comment default/distro -m tcp -j DNAT --to-destination ${backend.v4}:${POD_PORT}`,
    "COMMIT",
    "",
  ].join("\n");
  const r = spawnSync("nsenter", [`--net=/run/netns/${node.netns}`, "iptables-restore", "--noflush"], {
    input: rules,
    encoding: "utf8",
  });
  if (r.status !== 0) throw new Error(`iptables-restore: ${r.stderr}`);
}

/** The portmap plugin chained after ours for `pod`, as a runtime runs it for a hostPort. */
function portmapHostPort(pod: Pod): void {
  // Debian's portmap (1.1.1) speaks CNI up to 1.0.0, as the runtime would then convert our
  // 1.1.0 result (the same fields).
  const conf = {
    cniVersion: "1.0.0",
    name: "cluster",
    type: "portmap",
    capabilities: { portMappings: true },
    runtimeConfig: { portMappings: [{ hostPort: HOST_PORT, containerPort: POD_PORT, protocol: "tcp" }] },
    prevResult: { ...pod.add.json, cniVersion: "1.0.0" },
  };
  const r = spawnSync("nsenter", [`--net=/run/netns/${pod.node.netns}`, `${CNI_PATH}/portmap`], {
    input: JSON.stringify(conf),
    env: {
      PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
      CNI_COMMAND: "ADD",
      CNI_CONTAINERID: pod.containerId,
      CNI_NETNS: `/run/netns/${pod.netns}`,
      CNI_IFNAME: "eth0",
      CNI_PATH,
    },
    encoding: "utf8",
  });
  if (r.status !== 0) throw new Error(`portmap ADD: ${r.stdout}${r.stderr}`);
}

/** A host outside the cluster: a netns on a link of node A's own, as a router would be. */
function outsideHost(node: ClusterNode): string {
  const host = fx.makeNetns("nko");
  inNs(node.netns, "ip", [
    "link",
    "add",
    "out0",
    "type",
    "veth",
    "peer",
    "name",
    "out0",
    "netns",
    `/run/netns/${host}`,
  ]);
  inNs(node.netns, "ip", ["addr", "add", `${OUTSIDE.node}/24`, "dev", "out0"]);
  inNs(node.netns, "ip", ["link", "set", "out0", "up"]);
  inNs(host, "ip", ["addr", "add", `${OUTSIDE.host}/24`, "dev", "out0"]);
  inNs(host, "ip", ["link", "set", "out0", "up"]);
  inNs(host, "ip", ["link", "set", "lo", "up"]);
  return host;
}

describe(`Debian's packaged kernel, ${TEST_DATAPATH} pods`, () => {
  it("is the distribution's 6.12 with the JIT on; natCheck auto picks the conntrack kfunc", () => {
    expect(os.release()).toMatch(/^6\.12\.\d+\+deb12/);
    expect(fs.readFileSync("/proc/sys/net/core/bpf_jit_enable", "utf8").trim()).toBe("1");
    const pod = addPod(fx, a, "pod");
    const s = status(a);
    expect(s.kernel).toMatchObject({ netkit: true, tcx: true });
    expect(s.programs.natCheck, JSON.stringify(s.programs)).toBe("conntrack");
    expect(s.programs.conntrackUnavailable).toBeUndefined();
    const [link] = JSON.parse(inNs(a.netns, "ip", ["-d", "-j", "link", "show", "dev", pod.hostDevice])) as {
      linkinfo: { info_kind: string };
    }[];
    expect(link?.linkinfo.info_kind).toBe(TEST_DATAPATH);
  });

  it("keeps NAT'd flows on the stack: kube-proxy's Service, portmap's hostPort, masquerade out of the cluster", async () => {
    const client = addPod(fx, a, "client");
    const backend = addPod(fx, b, "backend");
    await startServer(fx, backend.netns, "0.0.0.0", POD_PORT);

    // The Service, DNAT'd on the client's node; the reply comes back across the wire
    // and must meet conntrack's reverse DNAT on node A before the client sees it.
    kubeProxyService(a, backend);
    const service = counterDelta(client, () => expect(tcpRequest(client.netns, VIP, 80)).toBe(`from ${client.v4}`));
    expect(service.passedStack).toBeGreaterThanOrEqual(1);
    // Between the same two pods, untranslated, the fast path still redirects.
    const direct = counterDelta(client, () =>
      expect(tcpRequest(client.netns, backend.v4, POD_PORT)).toBe(`from ${client.v4}`),
    );
    expect(direct.redirectedFib + direct.redirectedNeigh).toBeGreaterThanOrEqual(1);

    // The hostPort, DNAT'd on the backend's node by portmap's chains.
    portmapHostPort(backend);
    expect(tcpRequest(client.netns, b.wireV4, HOST_PORT)).toBe(`from ${client.v4}`);

    // Masquerade: the outside host sees node A, and its replies are un-NAT'd to the pod.
    const outside = outsideHost(a);
    await startServer(fx, outside, OUTSIDE.host, 9090);
    inNs(a.netns, "iptables", [
      "-t",
      "nat",
      "-A",
      "POSTROUTING",
      "-s",
      a.podSubnet4,
      "!",
      "-d",
      CLUSTER_CIDRS[0] ?? "",
      "-j",
      "MASQUERADE",
    ]);
    const masq = counterDelta(client, () =>
      expect(tcpRequest(client.netns, OUTSIDE.host, 9090)).toBe(`from ${OUTSIDE.node}`),
    );
    expect(masq.passedStack).toBeGreaterThanOrEqual(1);
  });
});
