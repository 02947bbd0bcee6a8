/**
 * The node-wide endpoint map (nkc_endpoints): which pod address lives behind which host
 * device, and on which datapath. Written only from here; the programs only read it.
 */

import type { BpfMap } from "../loader/maps";
import {
  decodeEndpointKey,
  decodeEndpointValue,
  EP_FLAG_NETKIT,
  EP_FLAG_NO_ARP,
  EP_FLAG_SOCK_BYPASS,
  endpointKey,
  endpointValue,
} from "./abi";

/** One address's entry in the endpoint map (nkc_endpoints): which pod device holds it. */
export interface EndpointEntry {
  /** veth host side or netkit primary. */
  hostIfindex: number;
  datapath: "veth" | "netkit";
  /** Its network asked for the same-node socket bypass (bpf/bpf_sock.c). */
  sockBypass?: boolean;
  /** Its device resolves no neighbours (netkit L3): ARP from the pod is refused. */
  noArp?: boolean;
}

export class EndpointMap {
  constructor(readonly map: BpfMap) {}

  upsert(ip: string, endpoint: EndpointEntry): void {
    const flags =
      (endpoint.datapath === "netkit" ? EP_FLAG_NETKIT : 0) |
      (endpoint.sockBypass ? EP_FLAG_SOCK_BYPASS : 0) |
      (endpoint.noArp ? EP_FLAG_NO_ARP : 0);
    this.map.update(endpointKey(ip), endpointValue({ hostIfindex: endpoint.hostIfindex, flags }));
  }

  /** Returns false when the address was not there (DEL may run twice). */
  delete(ip: string): boolean {
    return this.map.delete(endpointKey(ip));
  }

  get(ip: string): EndpointEntry | undefined {
    const value = this.map.lookup(endpointKey(ip));
    return value ? toEndpointEntry(value) : undefined;
  }

  list(): Map<string, EndpointEntry> {
    const all = new Map<string, EndpointEntry>();
    for (const key of [...this.map.keys()]) {
      const value = this.map.lookup(key);
      if (value) all.set(decodeEndpointKey(key), toEndpointEntry(value));
    }
    return all;
  }
}

function toEndpointEntry(value: Buffer): EndpointEntry {
  const v = decodeEndpointValue(value);
  return {
    hostIfindex: v.hostIfindex,
    datapath: v.flags & EP_FLAG_NETKIT ? "netkit" : "veth",
    ...(v.flags & EP_FLAG_SOCK_BYPASS ? { sockBypass: true } : {}),
    ...(v.flags & EP_FLAG_NO_ARP ? { noArp: true } : {}),
  };
}
