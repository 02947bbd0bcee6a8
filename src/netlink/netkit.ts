/**
 * netkit link-info encoding (include/uapi/linux/if_link.h, IFLA_NETKIT_*): the attributes
 * that go inside IFLA_INFO_DATA next to the peer info when creating a netkit pair. Pure.
 */
import { type Attr, attr, attrU32 } from "./attrs";

export const IFLA_NETKIT_POLICY = 3;
export const IFLA_NETKIT_PEER_POLICY = 4;
export const IFLA_NETKIT_MODE = 5;
export const IFLA_NETKIT_SCRUB = 6;
export const IFLA_NETKIT_PEER_SCRUB = 7;
/** Room reserved in front of and behind each packet (u16 each; newer kernels only). */
export const IFLA_NETKIT_HEADROOM = 8;
export const IFLA_NETKIT_TAILROOM = 9;

/** What a netkit end does with a packet when no BPF program is attached (or one says "next"). */
export const NETKIT_PASS = 0;
export const NETKIT_DROP = 2;

export const NETKIT_L2 = 0;
export const NETKIT_L3 = 1;

/** NETKIT_SCRUB_DEFAULT clears skb->mark and priority when crossing namespaces (6.10+). */
export const NETKIT_SCRUB_DEFAULT = 1;

export interface NetkitOptions {
  mode: "l2" | "l3";
  /** Policy of the primary (host) end: pass, so the stack can deliver to the pod. */
  primaryPolicy: "pass" | "drop";
  /** Policy of the peer (pod) end: drop until our program is attached. */
  peerPolicy: "pass" | "drop";
  /** Whether to send the scrub attributes (kernels before 6.10 reject them). */
  scrub: boolean;
  /** The room a device the pod's packets go on to needs (WireGuard's outer headers), so
   * they need no reallocation there; kernels without the attributes reject them. */
  room?: { headroom: number; tailroom: number };
}

const attrU16 = (type: number, v: number): Attr => {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(v);
  return attr(type, b);
};

const policy = (p: "pass" | "drop") => (p === "pass" ? NETKIT_PASS : NETKIT_DROP);

export function netkitInfoData(opts: NetkitOptions): Attr[] {
  const data = [
    attrU32(IFLA_NETKIT_MODE, opts.mode === "l3" ? NETKIT_L3 : NETKIT_L2),
    attrU32(IFLA_NETKIT_POLICY, policy(opts.primaryPolicy)),
    attrU32(IFLA_NETKIT_PEER_POLICY, policy(opts.peerPolicy)),
  ];
  if (opts.scrub) {
    data.push(attrU32(IFLA_NETKIT_SCRUB, NETKIT_SCRUB_DEFAULT), attrU32(IFLA_NETKIT_PEER_SCRUB, NETKIT_SCRUB_DEFAULT));
  }
  if (opts.room) {
    data.push(attrU16(IFLA_NETKIT_HEADROOM, opts.room.headroom), attrU16(IFLA_NETKIT_TAILROOM, opts.room.tailroom));
  }
  return data;
}
