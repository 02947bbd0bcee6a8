/**
 * Each pod's record in nkc_sock_pods (keyed by host ifindex): the network namespace its
 * ADD found it in, as a netns cookie, which the socket bypass's programs compare with
 * every socket's own before they admit it, and what they counted for the pod (its
 * sockets in the sockhash, those refused). Userspace writes the record at ADD and
 * deletes it with the pod's other ifindex-keyed state; the programs only count.
 */

import type { BpfMap } from "../loader/maps";
import { u32Key } from "../loader/struct";
import { decodeSockPod, type SockPod, sockPodValue } from "./abi";

/**
 * Records the pod's namespace. A record of the same namespace stays as it is (a repeated
 * ADD must not zero the count of sockets still held); one of another namespace belongs
 * to a device that held the ifindex before, and is replaced.
 */
export function recordSockPod(pods: BpfMap, hostIfindex: number, netnsCookie: bigint): void {
  if (readSockPod(pods, hostIfindex)?.netnsCookie === netnsCookie) return;
  const fresh: SockPod = { netnsCookie, sockets: 0, refusedBound: 0n, refusedNetns: 0n };
  pods.update(u32Key(hostIfindex), sockPodValue(fresh));
}

export function readSockPod(pods: BpfMap, hostIfindex: number): SockPod | undefined {
  const value = pods.lookup(u32Key(hostIfindex));
  return value ? decodeSockPod(value) : undefined;
}

/** The ifindexes that have a record (status sums what was refused over them). */
export function sockPodIfindexes(pods: BpfMap): number[] {
  return [...pods.keys()].map((key) => key.readUInt32LE(0));
}
