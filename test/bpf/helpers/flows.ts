/**
 * Test-only access to the per-endpoint flow tables: the product never writes an entry
 * (the programs own them), but a test needs to make a remembered flow old, or to write
 * what a program of an earlier holder of the table would have.
 */
import { type FlowTableMaps, withEndpointTable } from "../../../src/bpf/fastpath/direct";
import type { NodeMaps } from "../../../src/bpf/node";
import { forgetPodState } from "../../../src/bpf/pod-state";
import { objGetInfo } from "../../../src/sys/bpf-syscall";
import { ATTR, SIZEOF } from "../../../src/sys/bpf-uapi";

/** Moves the endpoint's entries `seconds` into the past (bpf_ktime_get_ns is
 * CLOCK_MONOTONIC, like process.hrtime), or to the clock's start on a machine that has
 * not been up that long (a freshly booted test VM). Their generation stays. */
export function ageFlows(maps: FlowTableMaps, hostIfindex: number, seconds: number): void {
  const found = withEndpointTable(maps, hostIfindex, (table) => {
    const past = process.hrtime.bigint() - BigInt(seconds) * 1_000_000_000n;
    for (const key of [...table.keys()]) {
      const value = table.lookup(key);
      if (!value) continue;
      value.writeBigUInt64LE(past > 0n ? past : 0n, 0);
      table.update(key, value, "replace-only");
    }
    return true;
  });
  if (!found) throw new Error(`endpoint ${hostIfindex} has no flow table`);
}

/** The endpoint's table entries as the kernel holds them (key, value), its own or not. */
export function rawEntries(maps: FlowTableMaps, hostIfindex: number): [Buffer, Buffer][] {
  return (
    withEndpointTable(maps, hostIfindex, (table) =>
      [...table.keys()].flatMap((key): [Buffer, Buffer][] => {
        const value = table.lookup(key);
        return value ? [[key, value]] : [];
      }),
    ) ?? []
  );
}

/** Empties the endpoint's table, so that a test starts from a pod that remembers nothing. */
export function clearFlowTable(maps: FlowTableMaps, hostIfindex: number): void {
  withEndpointTable(maps, hostIfindex, (table) => {
    for (const key of [...table.keys()]) table.delete(key);
  });
}

/**
 * Writes entries into the endpoint's table as a program would: verbatim (a program that
 * looked the table up under an earlier generation), or with `asOwner` under the
 * generation the endpoint holds now.
 */
export function writeEntries(
  maps: FlowTableMaps,
  hostIfindex: number,
  entries: [Buffer, Buffer][],
  asOwner = false,
): void {
  const found = withEndpointTable(maps, hostIfindex, (table, gen) => {
    for (const [key, value] of entries) {
      const v = Buffer.from(value);
      if (asOwner) v.writeBigUInt64LE(gen, 8);
      table.update(key, v);
    }
    return true;
  });
  if (!found) throw new Error(`endpoint ${hostIfindex} has no flow table`);
}

/** The kernel id of the table the endpoint holds (the same id: the same table). */
export function tableId(maps: FlowTableMaps, hostIfindex: number): number | undefined {
  return withEndpointTable(maps, hostIfindex, (table) => mapId(table.fd));
}

/** The kernel's id of the map open on `fd`: tells whether two fds are one map. */
export function mapId(fd: number): number {
  return objGetInfo(fd, SIZEOF["struct bpf_map_info"]).readUInt32LE(ATTR.MAP_INFO.id);
}

/** What DEL does to a pod's state in the node's maps (bpf/pod-state.ts): its table goes
 * back to the pool, its counters and limits go. */
export function forgetPod(node: NodeMaps, hostIfindex: number): void {
  forgetPodState({ node, sock: undefined, svc: undefined }, [{ hostIfindex, addresses: new Set() }]);
}
