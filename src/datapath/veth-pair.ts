/**
 * The veth datapath: a plain veth pair. One RTM_NEWLINK from the host namespace creates
 * both ends, the peer directly inside the pod netns under its final name, so there is no
 * moment where the pod device is visible on the host.
 */
import { createPair } from "../netlink/links";
import { failpoint } from "../sys/failpoints";
import { readPair } from "./pair";
import type { Datapath, DevicePair, Endpoint, Namespaces } from "./types";

export const vethDatapath: Datapath = {
  kind: "veth",
  async createPair(ns: Namespaces, ep: Endpoint): Promise<DevicePair> {
    await createPair(
      ns.host,
      "veth",
      { name: ep.hostDevice, mtu: ep.mtu, mac: ep.hostMac, ...ep.offload },
      { name: ep.ifname, mtu: ep.mtu, ...ep.offload },
      ns.podNetnsFd,
    );
    await failpoint("pair-requested");
    return readPair(ns, ep, "veth");
  },
};
