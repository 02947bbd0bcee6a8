/**
 * The node-wide endpoint map (nkc_endpoints): which pod address lives behind which host
 * device, and on which datapath. Written only from here; the programs only read it.
 */
import {
  decodeEndpointKey,
  decodeEndpointValue,
  EP_FLAG_NETKIT,
  EP_FLAG_NO_ARP,
  EP_FLAG_SOCK_BYPASS,
  endpointKey,
  endpointValue,
} from "./abi";
import type { BpfMap } from "./maps";

export interface Endpoint {
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

  upsert(ip: string, endpoint: Endpoint): void {
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

  get(ip: string): Endpoint | undefined {
    const value = this.map.lookup(endpointKey(ip));
    return value ? toEndpoint(value) : undefined;
  }

  list(): Map<string, Endpoint> {
    const all = new Map<string, Endpoint>();
    for (const key of [...this.map.keys()]) {
      const value = this.map.lookup(key);
      if (value) all.set(decodeEndpointKey(key), toEndpoint(value));
    }
    return all;
  }
}

function toEndpoint(value: Buffer): Endpoint {
  const v = decodeEndpointValue(value);
  return {
    hostIfindex: v.hostIfindex,
    datapath: v.flags & EP_FLAG_NETKIT ? "netkit" : "veth",
    ...(v.flags & EP_FLAG_SOCK_BYPASS ? { sockBypass: true } : {}),
    ...(v.flags & EP_FLAG_NO_ARP ? { noArp: true } : {}),
  };
}
