/**
 * The WireGuard controller (--encryption=wireguard): a peer on the node's device for
 * every other node that publishes a key, this node's own key on its Node object, and
 * the way the route controller sends each node's pod CIDRs (RouteSteering).
 *
 * - A Node event syncs that node's peer only: public key (its annotation), endpoint (its
 *   first InternalIP and the fixed port), allowed IPs (its pod CIDRs, both families, and
 *   its InternalIPs, so its own sockets reach our pods). A new key replaces the old peer
 *   in one request; a node gone, or without a key, loses its peer.
 * - The full sync ("*", after the first list and at every resync) reads the device and
 *   removes peers no node names, then syncs every node: a restarted agent, or a node
 *   deleted while none ran, converges.
 * - Strict (the default): every other node's pod CIDRs go through the device, peer or
 *   not; a node without a key is reported and its pods are unreachable (dropped by the
 *   device, counted in its tx_errors), never talked to in clear. Not strict: such a node
 *   is routed in clear, and a node's routes turn to the device once its peer is there.
 * - This node's key is published by a merge patch of its Node's annotation whenever the
 *   API's copy differs (a rotated key, an annotation someone removed).
 */
import { formatCidr, hostPrefix } from "../../cni/address";
import type { WgPeer, WgPeerChange } from "../../netlink/wireguard";
import type { Informer } from "../kube/informer";
import type { NodeFacts } from "../kube/node-facts";
import type { WorkQueue } from "../kube/workqueue";
import { agentLog } from "../log";
import type { RouteSteering } from "../routes/controller";
import type { PeerRoute } from "../routes/plan";
import { coveringRoutes, WIREGUARD_PORT, type WireguardKernel } from "./device";

export const WIREGUARD = "wireguard";
const ALL = "*";

/** How another node's pods are reached. */
export type EncryptionState = "encrypted" | "no-key" | "no-address" | "clear";

export interface EncryptionPeer {
  node: string;
  state: EncryptionState;
  publicKey?: string;
  endpoint?: string;
  /** Seconds since the epoch; 0: no handshake yet. */
  lastHandshake?: number;
  rxBytes?: number;
  txBytes?: number;
}

export interface EncryptionStatus {
  device: string;
  publicKey: string;
  port: number;
  strict: boolean;
  podMtu: number;
  peers: EncryptionPeer[];
}

export interface WireguardOptions {
  self: string;
  publicKey: string;
  strict: boolean;
  clusterCidrs: readonly string[];
  podMtu: number;
  device: string;
}

interface Configured {
  publicKey: string;
  endpoint: string;
  allowedIps: string;
}

export class WireguardController implements RouteSteering {
  /** The peer each node has on the device, as last configured. */
  private readonly configured = new Map<string, Configured>();
  private readonly states = new Map<string, EncryptionState>();
  private published: string | undefined;
  private device: WgPeer[] = [];
  readonly extra: PeerRoute[];

  constructor(
    private readonly queue: WorkQueue,
    private readonly nodes: Informer<NodeFacts>,
    private readonly kernel: WireguardKernel,
    private readonly opts: WireguardOptions,
    /** Writes this node's key into its Node object's annotation. */
    private readonly publish: (publicKey: string) => Promise<void>,
    /** A node's routes must be planned again (its peer came or went). */
    private readonly routesChanged: (node: string) => void,
  ) {
    this.extra = coveringRoutes(opts.clusterCidrs, kernel.ifindex);
    queue.register(WIREGUARD, (name) => (name === ALL ? this.syncAll() : this.syncNode(name)));
    nodes.onSynced(() => queue.add(WIREGUARD, ALL));
    nodes.onChange((name) => queue.add(WIREGUARD, name));
  }

  resync(): void {
    if (this.nodes.synced) this.queue.add(WIREGUARD, ALL);
  }

  /** Each of `node`'s routes through the device, unless it is to be talked to in clear. */
  steer(node: NodeFacts, routes: PeerRoute[]): PeerRoute[] {
    if (!this.opts.strict && !this.configured.has(node.name)) return routes;
    return routes.map((r) => ({ node: r.node, dst: r.dst, family: r.family, ifindex: this.kernel.ifindex }));
  }

  /** The peers as the device counts them (read again by refresh()). */
  get status(): EncryptionStatus {
    const byKey = new Map(this.device.map((p) => [p.publicKey, p]));
    const peers: EncryptionPeer[] = [...this.states].map(([node, state]) => {
      const c = this.configured.get(node);
      const p = c ? byKey.get(c.publicKey) : undefined;
      if (!c) return { node, state };
      return {
        node,
        state,
        publicKey: c.publicKey,
        endpoint: c.endpoint,
        lastHandshake: p?.lastHandshake ?? 0,
        rxBytes: Number(p?.rxBytes ?? 0n),
        txBytes: Number(p?.txBytes ?? 0n),
      };
    });
    return {
      device: this.opts.device,
      publicKey: this.opts.publicKey,
      port: WIREGUARD_PORT,
      strict: this.opts.strict,
      podMtu: this.opts.podMtu,
      peers: peers.sort((a, b) => a.node.localeCompare(b.node)),
    };
  }

  /** Reads the device's handshakes and byte counts, for status and metrics. */
  async refresh(): Promise<void> {
    this.device = (await this.kernel.read()).peers;
  }

  private async syncAll(): Promise<void> {
    const wanted = new Set<string>();
    for (const node of this.nodes.values()) {
      const key = node.name !== this.opts.self ? this.wanted(node)?.publicKey : undefined;
      if (key) wanted.add(key);
    }
    const stale = (await this.kernel.read()).peers.filter((p) => !wanted.has(p.publicKey));
    if (stale.length > 0) {
      await this.kernel.change(stale.map((p) => ({ publicKey: p.publicKey, remove: true })));
      agentLog.info(`wireguard: removed ${stale.length} peers no node names`);
    }
    for (const [name, c] of this.configured) if (!wanted.has(c.publicKey)) this.forget(name);
    for (const name of [...this.states.keys()]) if (!this.nodes.get(name)) this.states.delete(name);
    for (const node of this.nodes.values()) await this.syncNode(node.name);
    await this.refresh();
  }

  private async syncNode(name: string): Promise<void> {
    if (name === this.opts.self) return this.publishKey();
    const node = this.nodes.get(name);
    const want = node ? this.wanted(node) : undefined;
    const have = this.configured.get(name);
    const changes: WgPeerChange[] = [];
    if (have && have.publicKey !== want?.publicKey) changes.push({ publicKey: have.publicKey, remove: true });
    if (want && !(have && sameConfig(have, want))) changes.push(want);
    if (changes.length > 0) await this.kernel.change(changes);
    if (want) this.remember(name, want);
    else if (have) this.forget(name);
    this.setState(name, node ? this.stateOf(node, want) : undefined);
    if (Boolean(have) !== Boolean(want)) this.routesChanged(name);
  }

  /** The peer `node` should be: undefined without a key or an address to reach it at. */
  private wanted(
    node: NodeFacts,
  ): (WgPeerChange & { publicKey: string; endpoint: { address: string; port: number } }) | undefined {
    const ip = node.internalIPs[0];
    if (!node.wireguardKey || !ip || node.podCidrs.length === 0) return undefined;
    return {
      publicKey: node.wireguardKey,
      endpoint: { address: ip.text, port: WIREGUARD_PORT },
      allowedIps: [...node.podCidrs.map((c) => c.text), ...node.internalIPs.map((a) => formatCidr(hostPrefix(a.text)))],
    };
  }

  private stateOf(node: NodeFacts, want: WgPeerChange | undefined): EncryptionState {
    if (want) return "encrypted";
    if (node.wireguardKey) return "no-address";
    return this.opts.strict ? "no-key" : "clear";
  }

  private setState(name: string, state: EncryptionState | undefined): void {
    const before = this.states.get(name);
    if (state === undefined) this.states.delete(name);
    else this.states.set(name, state);
    if (state === before || state === undefined) return;
    if (state === "encrypted") agentLog.info(`wireguard: node ${name} is a peer`);
    else if (state === "no-key")
      agentLog.warn(`wireguard: node ${name} publishes no key: its pods are unreachable (--encryption-strict)`);
    else if (state === "clear")
      agentLog.warn(`wireguard: node ${name} publishes no key: its pods are talked to in clear`);
    else agentLog.warn(`wireguard: node ${name} has a key but no InternalIP or pod CIDR to peer with`);
  }

  private remember(
    name: string,
    want: WgPeerChange & { publicKey: string; endpoint: { address: string; port: number } },
  ): void {
    this.configured.set(name, {
      publicKey: want.publicKey,
      endpoint: `${want.endpoint.address}:${want.endpoint.port}`,
      allowedIps: (want.allowedIps ?? []).join(),
    });
  }

  private forget(name: string): void {
    this.configured.delete(name);
  }

  private async publishKey(): Promise<void> {
    const self = this.nodes.get(this.opts.self);
    if (!self || self.wireguardKey === this.opts.publicKey) {
      if (self) this.published = self.wireguardKey;
      return;
    }
    await this.publish(this.opts.publicKey);
    if (this.published !== this.opts.publicKey) agentLog.info(`wireguard: public key ${this.opts.publicKey} published`);
    this.published = this.opts.publicKey;
  }
}

function sameConfig(have: Configured, want: WgPeerChange & { endpoint: { address: string; port: number } }): boolean {
  return (
    have.publicKey === want.publicKey &&
    have.endpoint === `${want.endpoint.address}:${want.endpoint.port}` &&
    have.allowedIps === (want.allowedIps ?? []).join()
  );
}
