/**
 * Reading the path memory (nkc_flows, nkc_clients; see bpf/lib/flows.h). The programs own
 * its contents; userspace lists it for diagnostics and may clear it, never writes it.
 */
import { type Client, decodeClient, decodeFlow, type Flow } from "./abi";
import type { BpfMap } from "./maps";

export function listFlows(map: BpfMap): Flow[] {
  const flows: Flow[] = [];
  for (const key of [...map.keys()]) {
    const value = map.lookup(key);
    if (value) flows.push(decodeFlow(key, value));
  }
  return flows;
}

export function listClients(map: BpfMap): Client[] {
  return [...map.keys()].map(decodeClient);
}

/** Empties nkc_flows or nkc_clients. */
export function clearPathMemory(map: BpfMap): void {
  for (const key of [...map.keys()]) map.delete(key);
}
