/**
 * SCTP under NetworkPolicy through the real datapath, on the kernel that has SCTP: Debian's
 * 6.12 loads the module (`modprobe sctp`, as the kernel's own autoloading would); the UML
 * guest's kernel is built without it and this machine's has none, so only this lane can
 * carry an association at all. A pod isolated both ways allows SCTP on port 80 only:
 * associations to it succeed, to port 81 they do not, nor does TCP on port 80 (a rule's
 * protocol is never another's); its own associations go to the one pod its egress allows,
 * on port 80 alone. IPv4 and IPv6, from its node and across the wire. The pods' policies
 * are written into the node's maps as the agent writes them (KernelPolicyWriter,
 * PolicySlots), the plugin's ADD having recorded each pod's key (as
 * test/integration/policy-fragments.test.ts does). The NetworkPolicy truth tables run
 * upstream's SCTP specs in the same guest (`make test-vm-netpol`), by hand.
 *
 *   node A: p1 (isolated both ways), p2          node B: p3
 *   p1: in, SCTP 80 from anyone; out, SCTP 80 to p3.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PolicySlots } from "../../src/agent/policy/slots";
import { KernelPolicyWriter } from "../../src/agent/policy/writer";
import { objectsDir } from "../bpf/helpers/bpf-objects";
import { inGuest } from "../support/ceiling";
import { Fixture } from "../support/harness";
import { NETPOL_PROBE as PROBE, probeAnswers } from "../support/netpol-probe";
import { addPod, type ClusterNode, makeCluster, type Pod } from "../support/topology";

/** Seconds a probe waits: an emulated guest answers in seconds when a dozen run at once. */
const TIMEOUT_S = inGuest ? 6 : 2;

let fx: Fixture;
let a: ClusterNode;
let b: ClusterNode;
let p1: Pod;
let p2: Pod;
let p3: Pod;
let writer: KernelPolicyWriter;

const named = (name: string) => ({ CNI_ARGS: `K8S_POD_NAMESPACE=sctp;K8S_POD_NAME=${name}` });
const host = (ip: string) => ({ cidr: `${ip}/${ip.includes(":") ? 128 : 32}`, except: [] });

function serve(netns: string): ChildProcess {
  const server = spawn("nsenter", [`--net=/run/netns/${netns}`, "python3", PROBE, "serve", "80", "81"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  fx.processes.push({ kill: () => server.kill("SIGKILL") });
  return server;
}

beforeAll(async () => {
  spawnSync("modprobe", ["-q", "sctp"], { stdio: "ignore" });
  if (spawnSync("python3", [PROBE, "sctp"], { stdio: "ignore" }).status !== 0) {
    throw new Error("this kernel opens no SCTP socket (modprobe sctp failed): the distro lane's kernel has the module");
  }
  fx = new Fixture();
  [a, b] = makeCluster(fx, { networkPolicy: true });
  p1 = addPod(fx, a, "sctp-p1", a.conf, named("p1"));
  p2 = addPod(fx, a, "sctp-p2", a.conf, named("p2"));
  p3 = addPod(fx, b, "sctp-p3", b.conf, named("p3"));
  await Promise.all(
    [serve(p1.netns), serve(p2.netns), serve(p3.netns)].map((s) => new Promise((r) => s.stdout?.once("data", r))),
  );
  writer = new KernelPolicyWriter(a.bpffsRoot, fs.readFileSync(path.join(objectsDir, "bpf_lxc.o")));
  new PolicySlots(writer).place("sctp/p1", {
    ingress: [{ peers: "any", ports: [{ protocol: "SCTP", from: 80, to: 80 }] }],
    egress: [{ peers: [host(p3.v4), host(p3.v6)], ports: [{ protocol: "SCTP", from: 80, to: 80 }] }],
    origins: { ingress: ["sctp/p1 ingress[0]"], egress: ["sctp/p1 egress[0]"] },
  });
  // Three ADDs and three servers under emulation: minutes on a busy host.
}, 300_000);

afterAll(() => {
  writer?.close();
  fx?.cleanup();
});

/** One probe process from `from`, all targets at once ("HOST PORT PROTO"): "yes" or "no" for each. */
const answers = (from: Pod, targets: string[]) => probeAnswers(from.netns, TIMEOUT_S, targets);

describe("SCTP under NetworkPolicy, netkit pods, both families", () => {
  const both = (p: Pod, rest: string) => [`${p.v4} ${rest}`, `${p.v6} ${rest}`];

  it("into the isolated pod: SCTP 80 associates, SCTP 81 and TCP 80 do not, from its node and across", async () => {
    const into = [...both(p1, "80 sctp"), ...both(p1, "81 sctp"), ...both(p1, "80 tcp")];
    const expected = ["yes", "yes", "no", "no", "no", "no"];
    const [fromNode, across] = await Promise.all([answers(p2, into), answers(p3, into)]);
    expect({ fromNode, across }).toEqual({ fromNode: expected, across: expected });
  });

  it("out of it: SCTP 80 to the pod its egress allows, not 81 nor another pod; the others unjudged", async () => {
    const [out, control] = await Promise.all([
      answers(p1, [...both(p3, "80 sctp"), ...both(p3, "81 sctp"), ...both(p2, "80 sctp")]),
      // Not isolated: p2 associates with p3 on 81, which p1's policy refuses.
      answers(p2, [...both(p3, "81 sctp")]),
    ]);
    expect({ out, control }).toEqual({
      out: ["yes", "yes", "no", "no", "no", "no"],
      control: ["yes", "yes"],
    });
  });
});
