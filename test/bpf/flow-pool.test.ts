/**
 * The pool of per-endpoint flow tables (src/bpf/fastpath/direct.ts): ADD takes a free table, DEL
 * gives it back, and the map of maps changes only when the pool grows, POOL_GROWTH
 * tables at a time. What a handed-on table may prove is datapath.test.ts's ("a table
 * handed to a new holder ...").
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FLOW_OWNER, ifindexKey } from "../../src/bpf/fastpath/abi";
import { createFlowTable, filledSlots, POOL_GROWTH } from "../../src/bpf/fastpath/direct";
import { u32Key } from "../../src/bpf/loader/struct";
import { loadNodePrograms, type NodePrograms } from "../../src/bpf/node";
import { ifindexHolders } from "../../src/bpf/pod-state";
import { buildObjects } from "./helpers/bpf-objects";
import { TestBpffs } from "./helpers/bpffs";
import { forgetPod, tableId } from "./helpers/flows";

let bpffs: TestBpffs;
let node: NodePrograms;

beforeAll(() => {
  bpffs = TestBpffs.mount();
  node = loadNodePrograms(bpffs.root, buildObjects(), { clusterCidrs: ["10.244.0.0/16"] });
}, 60_000);

afterAll(() => {
  node?.close();
  bpffs?.release();
});

/** The kernel id of the table in each filled slot, in slot order. */
function slotTables(): number[] {
  const ids: number[] = [];
  for (let slot = 0; slot < filledSlots(node.maps.flows.pool); slot++) {
    const id = node.maps.flows.tables.lookup(u32Key(slot));
    ids.push(id ? id.readUInt32LE(0) : 0);
  }
  return ids;
}

const generation = (ifindex: number) => {
  const v = node.maps.flows.owners.lookup(ifindexKey(ifindex));
  expect(v?.length).toBe(FLOW_OWNER.size);
  return v && FLOW_OWNER.decode(v).gen;
};

describe("the flow-table pool", () => {
  const first = Array.from({ length: POOL_GROWTH }, (_, i) => 100 + i);

  it("fills a batch of slots on the first ADD and hands each endpoint a table of its own", () => {
    expect(filledSlots(node.maps.flows.pool)).toBe(0);
    createFlowTable(node.maps.flows, first[0] as number);
    expect(filledSlots(node.maps.flows.pool)).toBe(POOL_GROWTH);
    const grown = slotTables();
    expect(grown.every((id) => id > 0)).toBe(true);
    for (const ifindex of first.slice(1)) createFlowTable(node.maps.flows, ifindex);
    // The rest of the batch went to the next endpoints without touching the map of maps.
    expect(slotTables()).toEqual(grown);
    const held = first.map((ifindex) => tableId(node.maps.flows, ifindex));
    expect(new Set(held).size).toBe(POOL_GROWTH);
    expect(ifindexHolders(node.maps.flowOwner).sort()).toEqual(first);
  });

  it("grows by another batch only when every table is held", () => {
    const before = slotTables();
    createFlowTable(node.maps.flows, 200);
    expect(filledSlots(node.maps.flows.pool)).toBe(2 * POOL_GROWTH);
    expect(slotTables().slice(0, POOL_GROWTH)).toEqual(before);
  });

  it("gives a DEL's table to the next ADD, with a new generation, and leaves the map of maps alone", () => {
    const before = slotTables();
    const freed = tableId(node.maps.flows, 105);
    const oldGen = generation(105) as bigint;
    forgetPod(node.maps, 105);
    expect(tableId(node.maps.flows, 105)).toBeUndefined();
    createFlowTable(node.maps.flows, 300);
    expect(tableId(node.maps.flows, 300)).toBe(freed);
    expect(generation(300)).toBeGreaterThan(oldGen);
    expect(slotTables()).toEqual(before);
  });

  it("an ifindex that already holds a table (its DEL never came) gets a new generation, not a second table", () => {
    const owners = ifindexHolders(node.maps.flowOwner).length;
    const oldGen = generation(101) as bigint;
    createFlowTable(node.maps.flows, 101);
    expect(ifindexHolders(node.maps.flowOwner)).toHaveLength(owners);
    expect(generation(101)).toBeGreaterThan(oldGen);
  });
});
