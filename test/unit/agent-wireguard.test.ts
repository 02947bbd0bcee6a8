/**
 * The WireGuard controller alone (src/agent/wireguard/controller.ts) with a fake
 * informer and a fake device: a peer per node that publishes a key, one request per
 * change (a new key replaces the old peer in the same request), this node's key
 * published when the API's copy differs, stale peers removed by the full sync, and the
 * routes it steers: strict, every node through the device; not strict, in clear until
 * the node's peer is there.
 */
import { describe, expect, it } from "vitest";
import { type NodeFacts, WIREGUARD_KEY_ANNOTATION } from "../../src/agent/kube/node-facts";
import { nodeObject } from "../../src/agent/kube/objects";
import { WorkQueue } from "../../src/agent/kube/workqueue";
import type { PeerRoute } from "../../src/agent/routes/plan";
import { WireguardController } from "../../src/agent/wireguard/controller";
import type { WireguardKernel } from "../../src/agent/wireguard/device";
import { AF_INET } from "../../src/cni/address";
import type { WgDevice, WgPeerChange } from "../../src/netlink/wireguard";
import { FakeInformer } from "../support/fake-informer";

const key = (n: number) => Buffer.alloc(32, n).toString("base64");
const SELF_KEY = key(9);

const node = (name: string, n: number, wgKey?: string): NodeFacts => {
  const t = nodeObject({
    metadata: { name, ...(wgKey ? { annotations: { [WIREGUARD_KEY_ANNOTATION]: wgKey } } : {}) },
    spec: { podCIDRs: [`10.40.${n}.0/24`, `fd40:0:0:${n}::/64`] },
    status: { addresses: [{ type: "InternalIP", address: `10.30.0.${n}` }] },
  });
  if (!t) throw new Error(name);
  return t.object;
};

class FakeDevice implements WireguardKernel {
  readonly ifindex = 77;
  readonly peers = new Map<string, WgPeerChange>();
  requests: string[][] = [];
  async read(): Promise<WgDevice> {
    const peers = [...this.peers.values()].map((p) => ({
      publicKey: p.publicKey,
      endpoint: p.endpoint,
      allowedIps: p.allowedIps ?? [],
      lastHandshake: 0,
      rxBytes: 0n,
      txBytes: 0n,
    }));
    return { ifname: "netkit-wg0", publicKey: SELF_KEY, listenPort: 51871, peers };
  }
  async change(changes: WgPeerChange[]): Promise<void> {
    this.requests.push(changes.map((c) => `${c.remove ? "-" : "+"}${c.publicKey.slice(0, 4)}`));
    for (const c of changes) {
      if (c.remove) this.peers.delete(c.publicKey);
      else this.peers.set(c.publicKey, c);
    }
  }
}

function setup(strict: boolean) {
  const failed: string[] = [];
  const queue = new WorkQueue({ failed: (k, n, e) => failed.push(`${k} ${n}: ${e.message}`) });
  const nodes = new FakeInformer<NodeFacts>((n) => n.name);
  const device = new FakeDevice();
  const published: string[] = [];
  const rerouted: string[] = [];
  queue.register("routes", () => {});
  const wg = new WireguardController(
    queue,
    nodes,
    device,
    { self: "a", publicKey: SELF_KEY, strict, clusterCidrs: ["10.40.0.0/16"], podMtu: 1420, device: "netkit-wg0" },
    async (k) => {
      published.push(k);
    },
    (n) => rerouted.push(n),
  );
  return { queue, nodes, device, published, rerouted, wg, failed };
}

const route = (n: number): PeerRoute => ({
  node: "x",
  dst: `10.40.${n}.0/24`,
  family: AF_INET,
  gateway: `10.30.0.${n}`,
  ifindex: 2,
});

describe("the WireGuard controller", () => {
  it("peers with every node that publishes a key, publishes its own, steers strictly", async () => {
    const { queue, nodes, device, published, wg, failed } = setup(true);
    nodes.list([node("a", 1), node("b", 2, key(2)), node("c", 3)]);
    await queue.idle();
    expect(failed).toEqual([]);
    expect([...device.peers.keys()]).toEqual([key(2)]);
    const peer = device.peers.get(key(2));
    expect(peer?.endpoint).toEqual({ address: "10.30.0.2", port: 51871 });
    expect(peer?.allowedIps).toEqual(["10.40.2.0/24", "fd40:0:0:2::/64", "10.30.0.2/32"]);
    expect(published).toEqual([SELF_KEY]);
    expect(wg.status.peers.map((p) => `${p.node} ${p.state}`)).toEqual(["b encrypted", "c no-key"]);
    // Strict: c has no peer, and still never leaves in clear.
    for (const n of [2, 3]) {
      expect(wg.steer(node("c", n), [route(n)])).toEqual([
        { node: "x", dst: `10.40.${n}.0/24`, family: AF_INET, ifindex: 77 },
      ]);
    }
    expect(wg.extra.map((r) => `${r.dst} dev ${r.ifindex}`)).toEqual(["10.40.0.0/16 dev 77"]);
  });

  it("a new key replaces the peer in one request; a node gone loses it; its own key stays published", async () => {
    const { queue, nodes, device, published, rerouted } = setup(true);
    nodes.list([node("a", 1, SELF_KEY), node("b", 2, key(2))]);
    await queue.idle();
    expect(published).toEqual([]);
    device.requests = [];
    nodes.put(node("b", 2, key(5)));
    await queue.idle();
    expect(device.requests).toEqual([[`-${key(2).slice(0, 4)}`, `+${key(5).slice(0, 4)}`]]);
    expect(rerouted).toEqual(["b"]); // the first time it became a peer, not at the key change
    nodes.put(node("b", 2, key(5))); // nothing changed: no request
    await queue.idle();
    expect(device.requests.length).toBe(1);
    nodes.remove("b");
    await queue.idle();
    expect([...device.peers.keys()]).toEqual([]);
    expect(rerouted).toEqual(["b", "b"]);
    nodes.put(node("a", 1)); // someone removed our annotation
    await queue.idle();
    expect(published).toEqual([SELF_KEY]);
  });

  it("not strict: a node without a key is talked to in clear until its peer is there", async () => {
    const { queue, nodes, rerouted, wg } = setup(false);
    nodes.list([node("a", 1, SELF_KEY), node("c", 3)]);
    await queue.idle();
    expect(wg.steer(node("c", 3), [route(3)])).toEqual([route(3)]);
    expect(wg.status.peers.map((p) => p.state)).toEqual(["clear"]);
    nodes.put(node("c", 3, key(3)));
    await queue.idle();
    expect(rerouted).toEqual(["c"]);
    expect(wg.steer(node("c", 3), [route(3)])[0]?.ifindex).toBe(77);
  });

  it("the full sync removes peers no node names (a node deleted while no agent ran)", async () => {
    const { queue, nodes, device, wg } = setup(true);
    device.peers.set(key(7), { publicKey: key(7), allowedIps: ["10.40.7.0/24"] });
    nodes.list([node("a", 1, SELF_KEY), node("b", 2, key(2))]);
    await queue.idle();
    expect([...device.peers.keys()]).toEqual([key(2)]);
    device.peers.set(key(8), { publicKey: key(8) });
    wg.resync();
    await queue.idle();
    expect([...device.peers.keys()]).toEqual([key(2)]);
  });
});
