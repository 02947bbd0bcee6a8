/**
 * Test-only access to the per-endpoint flow tables: the product never writes an entry
 * (the programs own them), but a test needs to make a remembered flow old.
 */
import { ifindexKey } from "../../../src/bpf/abi";
import { DIRECT_TABLE_SPEC } from "../../../src/bpf/direct";
import { BpfMap } from "../../../src/bpf/maps";
import { mapGetFdById } from "../../../src/sys/bpf-syscall";

/** Moves every entry of the endpoint's table `seconds` into the past (bpf_ktime_get_ns
 * is CLOCK_MONOTONIC, like process.hrtime), or to the clock's start on a machine that
 * has not been up that long (a freshly booted test VM). */
export function ageFlows(outer: BpfMap, hostIfindex: number, seconds: number): void {
  const id = outer.lookup(ifindexKey(hostIfindex));
  if (!id) throw new Error(`endpoint ${hostIfindex} has no flow table`);
  const table = new BpfMap(mapGetFdById(id.readUInt32LE(0)), DIRECT_TABLE_SPEC);
  try {
    const then = Buffer.alloc(8);
    const past = process.hrtime.bigint() - BigInt(seconds) * 1_000_000_000n;
    then.writeBigUInt64LE(past > 0n ? past : 0n);
    for (const key of [...table.keys()]) table.update(key, then, "replace-only");
  } finally {
    table.close();
  }
}
