/**
 * `--encryption=wireguard` where the kernel has no WireGuard (this machine's: no module to
 * load), in the DaemonSet's container: the agent refuses at once, saying why, and leaves
 * nothing behind (no device, no route, no key, no conflist). Where the module exists the
 * same start must succeed instead: test/distro/wireguard.test.ts proves that side.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { useStandInApi } from "../support/fixtures";
import { type Fixture, inNs } from "../support/harness";
import type { StandInApiServer } from "../support/kube-apiserver";
import { AgentProcess, agentNode, makeNode } from "./agent-harness";

/** The Node build by its own name: BINARY is it already when the suite runs for that build. */
const NODE_EXECUTABLE = path.resolve(__dirname, "../../dist/netkit-cni-node");

const kernelHasWireguard = spawnSync("modprobe", ["-n", "wireguard"]).status === 0;

describe.runIf(!kernelHasWireguard)("netkit-cni agent --encryption=wireguard without WireGuard in the kernel", () => {
  let fx: Fixture;
  let api: StandInApiServer;
  useStandInApi((standIn) => {
    ({ fx, api } = standIn);
  });

  it("refuses the flag, saying why, and makes nothing", async () => {
    const netns = makeNode(fx, "nkwg");
    const node = agentNode(fx, api, netns, "node-a");
    api.addNode({ name: "node-a", podCIDRs: ["10.40.1.0/24"], internalIPs: ["10.30.0.1"] });
    const agent = AgentProcess.start(
      fx,
      node,
      ["--encryption=wireguard", "--host-interface=uplink0", "--bpffs-root", fx.bpffsRoot],
      { "cluster-cidr": "10.40.0.0/16" },
    );
    expect(await agent.exited).toBe(2);
    expect(agent.log).toContain(
      'netkit-cni agent: --encryption=wireguard cannot run on this node: the kernel has no WireGuard (no "wireguard" link kind, and no module to load for it)',
    );
    expect(inNs(netns, "ip", ["-o", "link"])).not.toContain("netkit-wg0");
    expect(inNs(netns, "ip", ["route", "show", "proto", "235"])).toBe("");
    expect(fs.existsSync(path.join(node.dataDir, "agent"))).toBe(false);
    expect(fs.existsSync(node.confDir) ? fs.readdirSync(node.confDir) : []).toEqual([]);
    expect(api.patches).toEqual([]);
  });

  it("the Node executable refuses it the same way", () => {
    const netns = makeNode(fx, "nkwgn");
    const r = spawnSync(
      "nsenter",
      [`--net=/run/netns/${netns}`, NODE_EXECUTABLE, "agent", "--encryption=wireguard", "--cluster-cidr=10.40.0.0/16"],
      { encoding: "utf8", env: { ...process.env, NODE_NAME: "node-a", KUBECONFIG: api.kubeconfig() } },
    );
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/--encryption=wireguard cannot run on this node: the kernel has no WireGuard/);
  });
});
