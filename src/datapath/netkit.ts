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

export interface NetkitSettings {
  mode: "l2" | "l3";
}

const EINVAL = 22;

export function netkitDatapath(settings: NetkitSettings): Datapath {
  return {
    kind: "netkit",
    async createPair(ns: Namespaces, ep: Endpoint): Promise<DevicePair> {
      // L2 mode needs real MACs on both ends; L3 devices carry all-zero ones.
      const l2 = settings.mode === "l2";
      const host = { name: ep.hostDevice, mtu: ep.mtu, mac: l2 ? ep.hostMac : undefined, ...ep.offload };
      const peer = { name: ep.ifname, mtu: ep.mtu, mac: l2 ? ep.podMac : undefined, ...ep.offload };
      const data = (scrub: boolean) =>
        netkitInfoData({
          mode: settings.mode,
          primaryPolicy: "pass",
          // Every pod gets a program (the fast path or the source check); until it is
          // attached the peer drops what the pod sends.
          peerPolicy: "drop",
          scrub,
        });
      try {
        await createPair(ns.host, "netkit", host, peer, ns.podNetnsFd, data(true));
      } catch (e) {
        // Kernels 6.7–6.9 predate the scrub attributes and reject them as unknown.
        if (!(e instanceof NetlinkError && e.errno === EINVAL && /attribute/i.test(e.extack ?? ""))) throw e;
        await createPair(ns.host, "netkit", host, peer, ns.podNetnsFd, data(false));
      }
      await failpoint("pair-requested");
      return readPair(ns, ep, "netkit");
    },
  };
}
