/**
 * What every datapath kind (veth, netkit) provides, so commands/ can build
 * and remove a pod's device pair without knowing which kind it is.
 */
import type { Link } from "../netlink/links";
import type { RtnlSocket } from "../netlink/socket";

/** The kinds of device pair a pod can get. */
export type DeviceKind = "veth" | "netkit";

/** One pod attachment: everything a datapath needs to build or find its devices. */
export interface Endpoint {
  containerId: string;
  ifname: string;
  /** Host-side device name, derived from containerId + ifname. */
  hostDevice: string;
  hostMac: string;
  /** The pod end's MAC where the device kind uses MACs we choose (netkit L2). */
  podMac: string;
  mtu: number;
  /** GSO/GRO limits copied from the uplink, so big packets are not split at the pod. */
  offload: { gsoMaxSize?: number; groMaxSize?: number };
  /** The pod's addresses as CIDRs from IPAM; the pod gets each as a /32 or /128. */
  addresses: string[];
}

/** Sockets bound to the two namespaces an endpoint spans. */
export interface Namespaces {
  host: RtnlSocket;
  pod: RtnlSocket;
  /** Open fd of the pod netns, for placing the peer there at creation. */
  podNetnsFd: number;
}

export interface DevicePair {
  hostLink: Link;
  podLink: Link;
}

export interface Datapath {
  readonly kind: DeviceKind;
  /** Creates the pair with the pod end already inside the pod netns, named `ifname`. */
  createPair(ns: Namespaces, endpoint: Endpoint): Promise<DevicePair>;
}
