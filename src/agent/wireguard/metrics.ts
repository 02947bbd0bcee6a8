/**
 * WireGuard's side of the agent's metrics and its one write to the API: the peers by
 * state, each peer's last handshake and bytes as the device counts them (read again at
 * each scrape), the packets the device dropped for want of a peer (its tx_errors: pod
 * traffic kept from leaving in clear), and the merge patch that publishes this node's key.
 */
import * as fs from "node:fs";
import type { KubeConfig } from "@kubernetes/client-node";
import { Gauge, type Registry } from "prom-client";
import { WIREGUARD_DEVICE } from "../../datapath/uplink";
import { WIREGUARD_KEY_ANNOTATION } from "../kube/node-facts";
import { mergePatch } from "../kube/transport";
import type { EncryptionState, WireguardController } from "./controller";

const STATES: EncryptionState[] = ["encrypted", "no-key", "no-address", "clear"];

/** What the device dropped because no peer has the destination: sysfs of the agent's own netns. */
export function wireguardDrops(): number | undefined {
  try {
    return Number(fs.readFileSync(`/sys/class/net/${WIREGUARD_DEVICE}/statistics/tx_errors`, "utf8"));
  } catch {
    return undefined;
  }
}

export function registerWireguardMetrics(registry: Registry, wireguard: WireguardController): void {
  const peers = () => wireguard.status.peers;
  new Gauge({
    name: "netkit_cni_agent_wireguard_peers",
    help: "Other nodes by how their pods are reached (encrypted, no-key, no-address, clear)",
    labelNames: ["state"],
    registers: [registry],
    async collect() {
      await wireguard.refresh();
      for (const s of STATES) this.set({ state: s }, peers().filter((p) => p.state === s).length);
    },
  });
  const perPeer = (name: string, help: string, value: (p: ReturnType<typeof peers>[number]) => number | undefined) =>
    new Gauge({
      name,
      help,
      labelNames: ["node"],
      registers: [registry],
      collect() {
        this.reset();
        for (const p of peers()) {
          const v = value(p);
          if (v !== undefined) this.set({ node: p.node }, v);
        }
      },
    });
  perPeer(
    "netkit_cni_agent_wireguard_last_handshake_seconds",
    "The peer's last handshake (Unix time; 0: none yet)",
    (p) => p.lastHandshake,
  );
  perPeer("netkit_cni_agent_wireguard_received_bytes", "Bytes the device received from the peer", (p) => p.rxBytes);
  perPeer("netkit_cni_agent_wireguard_sent_bytes", "Bytes the device sent to the peer", (p) => p.txBytes);
  new Gauge({
    name: "netkit_cni_agent_wireguard_dropped_packets",
    help: "Packets the WireGuard device dropped because no peer has their destination (never sent in clear)",
    registers: [registry],
    collect() {
      const n = wireguardDrops();
      if (n !== undefined) this.set(n);
    },
  });
}

/**
 * This node's public key on its Node object (the agent's only write: RBAC `patch` on
 * nodes); null withdraws it (a merge patch's null deletes the annotation).
 */
export async function publishNodeKey(kc: KubeConfig, node: string, publicKey: string | null): Promise<void> {
  await mergePatch(kc, `/api/v1/nodes/${encodeURIComponent(node)}`, {
    metadata: { annotations: { [WIREGUARD_KEY_ANNOTATION]: publicKey } },
  });
}
