/**
 * The veth datapath: a plain veth pair. One RTM_NEWLINK from the host namespace creates
 * both ends, the peer directly inside the pod netns under its final name, so there is no
 * moment where the pod device is visible on the host.
 */
import { CniError, ErrorCode } from "../cni/errors";
import { createPair, getLinkByName } from "../netlink/links";
import type { Datapath, DevicePair, Endpoint, Namespaces } from "./types";

export const vethDatapath: Datapath = {
  kind: "veth",
  async createPair(ns: Namespaces, ep: Endpoint): Promise<DevicePair> {
    await createPair(
      ns.host,
      "veth",
      { name: ep.hostDevice, mtu: ep.mtu, mac: ep.hostMac },
      { name: ep.ifname, mtu: ep.mtu },
      ns.podNetnsFd,
    );
    const hostLink = await getLinkByName(ns.host, ep.hostDevice);
    const podLink = await getLinkByName(ns.pod, ep.ifname);
    if (!hostLink || !podLink) {
      throw new CniError(
        ErrorCode.DatapathFailure,
        `veth pair ${ep.hostDevice}/${ep.ifname} vanished right after creation`,
      );
    }
    return { hostLink, podLink };
  },
};
