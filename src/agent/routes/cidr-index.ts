/**
 * Which owners' prefixes overlap a prefix, without looking at every prefix: the route
 * planner asks it for each node whose pod CIDRs changed (two nodes claiming one range
 * are routed to neither). Prefixes are kept by family and length, keyed by network
 * number: a prefix that contains the one asked about is found by one lookup per length
 * present (a cluster has one or two); only prefixes longer than the one asked about are
 * scanned, and in a cluster whose nodes all have /24s (or /64s) there are none. Pure.
 */
import { type Family, hostMask, type Subnet } from "../../cni/address";
import { getOrMake } from "../collections";

export class CidrIndex {
  /** family → prefix length → network → owners */
  private readonly byLength = new Map<Family, Map<number, Map<bigint, Set<string>>>>();

  add(subnet: Subnet, owner: string): void {
    const lengths = getOrMake(this.byLength, subnet.family, () => new Map());
    const networks = getOrMake(lengths, subnet.prefixLength, () => new Map());
    getOrMake(networks, subnet.network, () => new Set()).add(owner);
  }

  remove(subnet: Subnet, owner: string): void {
    const lengths = this.byLength.get(subnet.family);
    const networks = lengths?.get(subnet.prefixLength);
    const owners = networks?.get(subnet.network);
    if (!lengths || !networks || !owners) return;
    owners.delete(owner);
    if (owners.size > 0) return;
    networks.delete(subnet.network);
    if (networks.size === 0) lengths.delete(subnet.prefixLength);
  }

  /** The owners of prefixes that contain `subnet`, lie inside it, or equal it. */
  overlapping(subnet: Subnet): Set<string> {
    const found = new Set<string>();
    const lengths = this.byLength.get(subnet.family);
    if (!lengths) return found;
    for (const [length, networks] of lengths) {
      if (length <= subnet.prefixLength) {
        const network = subnet.network & ~hostMask(subnet.family, length);
        for (const o of networks.get(network) ?? []) found.add(o);
        continue;
      }
      const mask = ~hostMask(subnet.family, subnet.prefixLength);
      for (const [network, owners] of networks) {
        if ((network & mask) === subnet.network) for (const o of owners) found.add(o);
      }
    }
    return found;
  }
}
