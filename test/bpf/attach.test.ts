/**
 * Attaching through tcx links on a real veth in a namespace we build: the link is
 * visible to bpftool under our program names, survives its fd while pinned, swaps its
 * program atomically (BPF_LINK_UPDATE), and detaches when unpinned and closed.
 */
import { execFileSync } from "node:child_process";
import * as path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { attachTcx, BpfLink } from "../../src/bpf/loader/links";
import { pinExists, unpin } from "../../src/bpf/loader/pins";
import { loadNodePrograms, type NodePrograms } from "../../src/bpf/node";
import { BpfError } from "../../src/sys/bpf-syscall";
import { inNetns } from "../../src/sys/netns";
import { buildObjects } from "./helpers/bpf-objects";
import { TestBpffs } from "./helpers/bpffs";
import { TestNetns } from "./helpers/test-netns";

let ns: TestNetns;
let bpffs: TestBpffs;
let node: NodePrograms;
let hostSide: number;
const links: BpfLink[] = [];

/** bpftool's view of the device's tcx hooks, as "direction name" strings. */
function tcxPrograms(dev: string): string[] {
  // nsenter --net keeps our mount namespace (ip netns exec would remount /sys).
  const out = execFileSync("nsenter", [`--net=${ns.path}`, "bpftool", "-j", "net", "show", "dev", dev], {
    encoding: "utf8",
  });
  const [view] = JSON.parse(out) as { tc?: { devname: string; kind: string; name: string }[] }[];
  return (view?.tc ?? []).map((t) => `${t.kind} ${t.name}`);
}

beforeAll(() => {
  const objects = buildObjects();
  ns = TestNetns.create("at");
  bpffs = TestBpffs.mount();
  ns.ip("link", "add", "nkba0", "type", "veth", "peer", "name", "nkba1");
  ns.ip("link", "set", "nkba0", "up");
  hostSide = ns.link("nkba0").ifindex;
  node = loadNodePrograms(bpffs.root, objects, { clusterCidrs: ["10.244.0.0/16"] });
}, 60_000);

afterEach(() => {
  for (const link of links.splice(0)) link.close();
});

afterAll(() => {
  node?.close();
  bpffs?.release();
  ns?.destroy();
});

describe("tcx links", () => {
  it("attach, pin, show in bpftool, update, then unpin + close detaches", () => {
    const pinPath = path.join(bpffs.root, "endpoints", "nkb-test", "from_pod");
    // tcx resolves target_ifindex in the caller's network namespace.
    const ingress = inNetns(ns.path, () => attachTcx(node.programs.fromPod, hostSide, "ingress"));
    const egress = inNetns(ns.path, () => attachTcx(node.programs.hostIn, hostSide, "egress"));
    links.push(egress);
    ingress.pin(pinPath);
    ingress.close(); // the pin alone keeps it attached
    expect(tcxPrograms("nkba0").sort()).toEqual(["tcx/egress nkc_host_in", "tcx/ingress nkc_from_pod"]);

    const pinned = BpfLink.openPinned(pinPath);
    links.push(pinned);
    pinned.update(node.programs.hostIn, node.programs.fromPod);
    expect(tcxPrograms("nkba0").filter((p) => p.startsWith("tcx/ingress"))).toEqual(["tcx/ingress nkc_host_in"]);
    // BPF_F_REPLACE with a program that is not the attached one is refused.
    expect(() => pinned.update(node.programs.fromPod, node.programs.fromPod)).toThrow(BpfError);

    expect(unpin(pinPath)).toBe(true);
    expect(pinExists(pinPath)).toBe(false);
    pinned.close();
    egress.close();
    expect(tcxPrograms("nkba0")).toEqual([]);
  });

  it("detach() removes the program while the link is still pinned", () => {
    const pinPath = path.join(bpffs.root, "endpoints", "nkb-test", "detach");
    const link = inNetns(ns.path, () => attachTcx(node.programs.fromPod, hostSide, "ingress"));
    links.push(link);
    link.pin(pinPath);
    expect(tcxPrograms("nkba0")).toEqual(["tcx/ingress nkc_from_pod"]);
    link.detach();
    expect(tcxPrograms("nkba0")).toEqual([]);
    unpin(pinPath);
  });

  it("reports a missing device as ENODEV", () => {
    let error: unknown;
    try {
      inNetns(ns.path, () => attachTcx(node.programs.fromPod, 999_999, "ingress"));
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(BpfError);
    expect((error as BpfError).code).toBe("ENODEV");
  });
});
