/**
 * The netkit datapath (Linux 6.7+). One RTM_NEWLINK from the host namespace creates the
 * pair, the peer already inside the pod netns under its final name: L3 mode by default
 * (no ARP, no MACs), the primary's policy pass, and the peer's policy drop ("blackhole")
 * so nothing leaves the pod before its program is attached. Once a program is on the
 * peer hook the policy no longer decides (a program's NEXT means pass; see netkit_xmit).
 * MTU and GSO/GRO limits are set on both ends: the peer does not inherit them.
 */
import { createPair } from "../netlink/links";
import { netkitInfoData } from "../netlink/netkit";
import { NetlinkError } from "../netlink/socket";
import { failpoint } from "../sys/failpoints";
import { readPair } from "./pair";
import type { Datapath, DevicePair, Endpoint, Namespaces } from "./types";

interface NetkitSettings {
  mode: "l2" | "l3";
  /** Headroom and tailroom for the pair (IFLA_NETKIT_HEADROOM/TAILROOM), where the kernel has them. */
  room?: { headroom: number; tailroom: number };
}

/**
 * What WireGuard's device asks of a packet it encrypts (drivers/net/wireguard/device.c:
 * needed_headroom DATA_PACKET_HEAD_ROOM, its 16-byte message header and the largest outer
 * IP + UDP headers past NET_SKB_PAD, 4-aligned: 128; needed_tailroom: padding to 16 and
 * the 16-byte tag, 32). A pod's packet made with that room is encrypted in place.
 */
export const WIREGUARD_ROOM = { headroom: 128, tailroom: 32 };

const EINVAL = 22;

export function netkitDatapath(settings: NetkitSettings): Datapath {
  return {
    kind: "netkit",
    async createPair(ns: Namespaces, ep: Endpoint): Promise<DevicePair> {
      // L2 mode needs real MACs on both ends; L3 devices carry all-zero ones.
      const l2 = settings.mode === "l2";
      const host = { name: ep.hostDevice, mtu: ep.mtu, mac: l2 ? ep.hostMac : undefined, ...ep.offload };
      const peer = { name: ep.ifname, mtu: ep.mtu, mac: l2 ? ep.podMac : undefined, ...ep.offload };
      const data = (scrub: boolean, room: NetkitSettings["room"]) =>
        netkitInfoData({
          mode: settings.mode,
          primaryPolicy: "pass",
          // Every pod gets a program (the fast path or the source check); until it is
          // attached the peer drops what the pod sends.
          peerPolicy: "drop",
          scrub,
          room,
        });
      // Newest attributes first; each older kernel rejects the ones it predates as unknown:
      // headroom and tailroom (newer than 6.12), then scrub (6.7–6.9).
      const attempts = [
        ...(settings.room ? [data(true, settings.room)] : []),
        data(true, undefined),
        data(false, undefined),
      ];
      for (const [i, attempt] of attempts.entries()) {
        try {
          await createPair(ns.host, "netkit", host, peer, ns.podNetnsFd, attempt);
          break;
        } catch (e) {
          const unknown = e instanceof NetlinkError && e.errno === EINVAL && /attribute/i.test(e.extack ?? "");
          if (!unknown || i === attempts.length - 1) throw e;
        }
      }
      await failpoint("pair-requested");
      return readPair(ns, ep, "netkit");
    },
  };
}
