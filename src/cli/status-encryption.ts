/**
 * Encryption between nodes as `status` shows it: the agent's WireGuard device (made by
 * `netkit-cni agent --encryption=wireguard`), whether ADD may add pods of an encrypting
 * network (the agent marks it ready by its alias), and each peer: its key, endpoint,
 * allowed IPs, last handshake and bytes, as the kernel keeps them. Read-only: the device
 * is read through WireGuard's generic netlink family, never configured.
 */
import { WIREGUARD_DEVICE, WIREGUARD_READY_ALIAS } from "../datapath/uplink";
import type { Link } from "../netlink/links";
import { type WgPeer, WireguardGenl } from "../netlink/wireguard";

export interface EncryptionPeerStatus {
  publicKey: string;
  /** address:port, [v6]:port; absent until the agent gave one. */
  endpoint: string | undefined;
  allowedIps: string[];
  /** Seconds since the epoch; 0: no handshake yet. */
  lastHandshake: number;
  /** As numbers (`status --json` prints them; a byte count near 2^53 is years away). */
  rxBytes: number;
  txBytes: number;
}

export interface EncryptionStatus {
  device: string;
  /** The agent has routed the cluster CIDRs through it: ADD adds pods of encrypting networks. */
  ready: boolean;
  listenPort: number | undefined;
  publicKey: string | undefined;
  peers: EncryptionPeerStatus[];
  /** Why the peers could not be read (the device is there, the family is not). */
  unreadable: string | undefined;
}

/** undefined: no WireGuard device of ours on this node (encryption never started here). */
export async function encryptionStatus(byName: Map<string, Link>): Promise<EncryptionStatus | undefined> {
  const link = byName.get(WIREGUARD_DEVICE);
  if (link?.kind !== "wireguard") return undefined;
  const base = { device: link.name, ready: link.alias === WIREGUARD_READY_ALIAS };
  const genl = await WireguardGenl.open();
  if (!genl)
    return {
      ...base,
      listenPort: undefined,
      publicKey: undefined,
      peers: [],
      unreadable: "no WireGuard generic netlink family",
    };
  try {
    const dev = await genl.get(WIREGUARD_DEVICE);
    return {
      ...base,
      listenPort: dev.listenPort,
      publicKey: dev.publicKey,
      peers: dev.peers.map(peerStatus),
      unreadable: undefined,
    };
  } finally {
    genl.close();
  }
}

function peerStatus(p: WgPeer): EncryptionPeerStatus {
  const ep = p.endpoint;
  return {
    publicKey: p.publicKey,
    endpoint: ep ? (ep.address.includes(":") ? `[${ep.address}]:${ep.port}` : `${ep.address}:${ep.port}`) : undefined,
    allowedIps: p.allowedIps,
    lastHandshake: p.lastHandshake,
    rxBytes: Number(p.rxBytes),
    txBytes: Number(p.txBytes),
  };
}

const shortKey = (key: string) => `${key.slice(0, 8)}…`;

export function formatEncryption(s: EncryptionStatus | undefined): string[] {
  if (!s) return ["encryption      off (no WireGuard device: the agent runs without --encryption)"];
  const state = s.ready ? "ready" : "not ready: ADD of an encrypting network waits (code 11)";
  const head = `encryption      WireGuard on ${s.device} (${state})`;
  if (s.unreadable) return [`${head}; peers unreadable: ${s.unreadable}`];
  const lines = [
    `${head}, port ${s.listenPort}, key ${s.publicKey ? shortKey(s.publicKey) : "none"}, ${s.peers.length} peers`,
  ];
  for (const p of s.peers) {
    const handshake = p.lastHandshake > 0 ? new Date(p.lastHandshake * 1000).toISOString() : "none yet";
    lines.push(
      `  peer ${shortKey(p.publicKey)} ${p.endpoint ?? "(no endpoint)"}: ${p.allowedIps.length > 0 ? p.allowedIps.join(", ") : "no allowed IPs"}; handshake ${handshake}; rx ${p.rxBytes} B, tx ${p.txBytes} B`,
    );
  }
  return lines;
}
