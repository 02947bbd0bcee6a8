/**
 * `"podHook": "tc"`: a veth pod's programs as direct-action filters on its host device's
 * clsact hook instead of pinned tcx links (src/datapath/pod-filters.ts). The pod must be
 * the same pod either way: the fast path's crossings, the source check, the ingress
 * limit's program, CHECK, `status`, `endpoints`, DEL, and a tcx pod beside it on one node
 * (an admin's A/B). What differs is where the programs hang: nothing pinned, filters that
 * anyone with the device's qdiscs can remove (CHECK says so), and an upgrade that
 * replaces each filter in place with the newer build's program.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { PROGRAM_NAMES } from "../../src/bpf/fastpath/abi";
import { programName } from "../../src/bpf/loader/programs";
import { limitsOf, pinnedEndpointDevices } from "../../src/datapath/node-state";
import { useCluster } from "../support/fixtures";
import { BINARY, type Fixture, inNs, ping, runPlugin, sh, withPluginBinary } from "../support/harness";
import { addPod, type ClusterNode, counterDelta, delPod, ifindexOf, type Pod } from "../support/topology";

const OLDER = path.resolve(__dirname, "../../dist/older/netkit-cni");

let fx: Fixture;
let a: ClusterNode;

useCluster({ datapath: "veth" }, (cluster) => {
  ({ fx, a } = cluster);
});

const tcConf = (extra: Record<string, unknown> = {}) => ({ ...a.conf, podHook: "tc", ...extra });

interface TcFilter {
  kind: string;
  pref?: number;
  options?: { bpf_name?: string; prog?: { id: number } };
}

/** The bpf filters on the pod's host device, as `tc` reads them: name and program. */
function filtersOf(pod: Pod, hook: "ingress" | "egress"): { pref: number; name: string; programId: number }[] {
  const out = inNs(a.netns, "tc", ["-j", "filter", "show", "dev", pod.hostDevice, hook]);
  return (JSON.parse(out || "[]") as TcFilter[])
    .filter((f) => f.kind === "bpf" && f.options?.prog)
    .map((f) => ({ pref: f.pref ?? 0, name: f.options?.bpf_name ?? "", programId: f.options?.prog?.id ?? 0 }));
}

/** The tcx programs on the pod's host device, as bpftool lists them. */
function tcxPrograms(pod: Pod): string[] {
  const net = JSON.parse(inNs(a.netns, "bpftool", ["-j", "net", "show", "dev", pod.hostDevice])) as {
    tc?: { kind: string; name: string }[];
  }[];
  return net
    .flatMap((n) => n.tc ?? [])
    .filter((t) => t.kind.startsWith("tcx"))
    .map((t) => t.name);
}

const attachment = (pod: Pod) => ({ containerId: pod.containerId, netns: `/run/netns/${pod.netns}`, ifname: "eth0" });

describe('"podHook": "tc"', () => {
  it("runs the pod's program as a filter, pins nothing, and the fast path redirects v4 and v6", () => {
    const p1 = addPod(fx, a, "tc1", tcConf());
    const p2 = addPod(fx, a, "tc2", tcConf());
    expect(filtersOf(p1, "ingress").map((f) => f.name)).toEqual([PROGRAM_NAMES.fromPod]);
    expect(filtersOf(p1, "egress")).toEqual([]);
    expect(tcxPrograms(p1)).toEqual([]);
    expect(pinnedEndpointDevices(a.bpffsRoot)).toEqual([]);
    const d = counterDelta(p1, () => {
      expect(ping(p1.netns, p2.v4)).toBe(true);
      expect(ping(p1.netns, p2.v6)).toBe(true);
    });
    expect(d.redirectedLocal).toBeGreaterThanOrEqual(2);
  });

  it("a tcx pod and a tc pod on one node reach each other, each on its own hook", () => {
    const linked = addPod(fx, a, "tcx1");
    const filtered = addPod(fx, a, "tc1", tcConf());
    expect(tcxPrograms(linked)).toEqual([PROGRAM_NAMES.fromPod]);
    expect(filtersOf(linked, "ingress")).toEqual([]);
    expect(filtersOf(filtered, "ingress").map((f) => f.name)).toEqual([PROGRAM_NAMES.fromPod]);
    expect(pinnedEndpointDevices(a.bpffsRoot)).toEqual([linked.hostDevice]);
    const d = counterDelta(filtered, () => {
      expect(ping(filtered.netns, linked.v4)).toBe(true);
      expect(ping(filtered.netns, linked.v6)).toBe(true);
    });
    expect(d.redirectedLocal).toBeGreaterThanOrEqual(2);
    expect(ping(linked.netns, filtered.v4)).toBe(true);
  });

  it("drops what a pod sends from an address not its own, with the fast path and with the source check alone", () => {
    for (const [id, extra] of [
      ["fp", {}],
      ["sc", { fastPath: false }],
    ] as const) {
      const pod = addPod(fx, a, `spoof-${id}`, tcConf(extra));
      expect(filtersOf(pod, "ingress").map((f) => f.name)).toEqual([
        id === "fp" ? PROGRAM_NAMES.fromPod : PROGRAM_NAMES.sourceCheck,
      ]);
      inNs(pod.netns, "ip", ["addr", "add", "10.221.1.250/32", "dev", "eth0"]);
      const spoofed = () =>
        sh("sh", [
          "-c",
          `nsenter --net=/run/netns/${pod.netns} ping -c2 -W1 -I 10.221.1.250 ${a.wireV4} >/dev/null 2>&1; echo $?`,
        ]);
      const d = counterDelta(pod, () => expect(spoofed().trim()).not.toBe("0"));
      expect(d.droppedSpoofed).toBeGreaterThanOrEqual(2);
      expect(ping(pod.netns, a.wireV4)).toBe(true);
    }
  });

  it("puts NetworkPolicy's program on egress ahead of the ingress limit's, and CHECK misses either", () => {
    const conf = tcConf({ networkPolicy: true, runtimeConfig: { bandwidth: { ingressRate: 8e6, ingressBurst: 8e4 } } });
    const pod = addPod(fx, a, "tc-limited", conf);
    // The ingress limit has a program where it paces (fq) or polices; a tbf alone needs none.
    const mode = limitsOf(a.bpffsRoot, ifindexOf(a.netns, pod.hostDevice))?.ingressMode;
    const limited = mode !== "qdisc";
    expect(filtersOf(pod, "egress").map((f) => [f.pref, f.name])).toEqual([
      [1, PROGRAM_NAMES.podPolicy],
      ...(limited ? [[2, PROGRAM_NAMES.podIngress]] : []),
    ]);
    const check = () => runPlugin(a.netns, "CHECK", attachment(pod), { ...conf, prevResult: pod.add.json });
    const ok = check();
    expect(ok.status, ok.stdout).toBe(0);
    if (limited) {
      inNs(a.netns, "tc", ["filter", "del", "dev", pod.hostDevice, "egress", "pref", "2"]);
      expect(String(check().json?.msg)).toContain(`ingress limit of ${pod.hostDevice} is not attached`);
    }
    inNs(a.netns, "tc", ["filter", "del", "dev", pod.hostDevice, "egress", "pref", "1"]);
    const r = check();
    expect(r.json).toMatchObject({ code: 101 });
    expect(String(r.json?.msg)).toContain(`NetworkPolicy of ${pod.hostDevice} is not attached`);
  });

  it("CHECK passes, then fails once someone removes the pod's filter; status and endpoints say where its programs are", () => {
    const pod = addPod(fx, a, "tc-chk", tcConf());
    const withPrev = { ...tcConf(), prevResult: pod.add.json };
    const ok = runPlugin(a.netns, "CHECK", attachment(pod), withPrev);
    expect(ok.status, ok.stdout).toBe(0);
    const status = JSON.parse(inNs(a.netns, BINARY, ["status", "--bpffs-root", a.bpffsRoot, "--json"])) as {
      endpoints: { devices: number; pinned: number; filtered: number };
      problems: string[];
    };
    expect(status.endpoints).toMatchObject({ devices: 1, pinned: 0, filtered: 1 });
    expect(status.problems.filter((p) => p.includes(pod.hostDevice))).toEqual([]);
    const rows = () =>
      JSON.parse(inNs(a.netns, BINARY, ["endpoints", "--bpffs-root", a.bpffsRoot, "--json"])) as {
        hostDevice: string;
        programsAttached: boolean;
      }[];
    expect(rows().find((r) => r.hostDevice === pod.hostDevice)?.programsAttached).toBe(true);

    inNs(a.netns, "tc", ["filter", "del", "dev", pod.hostDevice, "ingress"]);
    const r = runPlugin(a.netns, "CHECK", attachment(pod), withPrev);
    expect(r.json).toMatchObject({ code: 101 });
    expect(String(r.json?.msg)).toContain(`eBPF programs of ${pod.hostDevice} are not attached`);
    expect(rows().find((row) => row.hostDevice === pod.hostDevice)?.programsAttached).toBe(false);
  });

  it("DEL leaves no device, filter or pin, and is idempotent", () => {
    const pod = addPod(fx, a, "tc-del", tcConf());
    expect(delPod(pod).status).toBe(0);
    expect(delPod(pod).status).toBe(0);
    expect(fs.existsSync(path.join(a.bpffsRoot, "endpoints", pod.hostDevice))).toBe(false);
    expect(sh("sh", ["-c", `nsenter --net=/run/netns/${a.netns} ip link show ${pod.hostDevice} 2>&1 || true`])).toMatch(
      /does not exist/,
    );
  });

  it("a newer build's first ADD moves an older build's filters onto its programs in place", () => {
    const older = withPluginBinary(OLDER, () => addPod(fx, a, "tc-old", tcConf()));
    const peer = withPluginBinary(OLDER, () => addPod(fx, a, "tc-old2", tcConf()));
    const [before] = filtersOf(older, "ingress");
    expect(before?.name).toBe(PROGRAM_NAMES.fromPod);
    // This build loads its own programs and switches the older pods' filters.
    addPod(fx, a, "tc-new", tcConf());
    const after = filtersOf(older, "ingress");
    expect(after).toHaveLength(1);
    expect(after[0]?.programId).not.toBe(before?.programId);
    expect(programName(after[0]?.programId ?? 0)).toBe(PROGRAM_NAMES.fromPod);
    const [newest] = filtersOf(peer, "ingress");
    expect(newest?.programId).toBe(after[0]?.programId);
    const d = counterDelta(older, () => expect(ping(older.netns, peer.v4)).toBe(true));
    expect(d.redirectedLocal).toBeGreaterThanOrEqual(1);
  });
});
