/**
 * Reading the per-flow path memory (nkc_flows). The programs own its contents; userspace
 * lists it for diagnostics and may clear it, never writes flows itself.
 */
import { decodeFlow, type Flow } from "./abi";
import type { BpfMap } from "./maps";

export function listFlows(map: BpfMap): Flow[] {
  const flows: Flow[] = [];
  for (const key of [...map.keys()]) {
    const value = map.lookup(key);
    if (value) flows.push(decodeFlow(key, value));
  }
  return flows;
}

export function clearFlows(map: BpfMap): void {
  for (const key of [...map.keys()]) map.delete(key);
}
