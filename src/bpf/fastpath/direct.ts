/**
 * The per-endpoint direct-flow tables behind bpf/lib/direct.h: each pod has its own LRU
 * table of flows proven direct, so one pod's flows can only ever evict its own. The
 * programs own the tables' contents; userspace creates tables, hands them to endpoints,
 * takes them back and reads them, and never writes an entry.
 *
 * Tables live in a pool (nkc_flow_tables, an array of maps) because putting a table into
 * a map of maps, or taking one out, waits for an RCU grace period (10-30 ms, paid at ADD
 * and again at DEL when every pod had a table of its own). ADD takes a free slot and
 * only grows the pool, POOL_GROWTH tables in one batch and so one grace period, when
 * none is free; DEL just forgets which endpoint held it. What makes a passed-on table
 * safe is the generation (nkc_flow_owner): every entry carries its writer's, each ADD
 * hands out a new one, and the programs trust only entries of the generation they look
 * up, so nothing a previous holder wrote (even a program still running at its DEL) can
 * prove a flow direct for the next. Tables are emptied when taken; that is for space
 * and for the figures, not for correctness.
 */
import { BpfError, mapGetFdById, mapLookupBatch, mapUpdateBatch } from "../../sys/bpf-syscall";
import { BPF_MAP_TYPE } from "../../sys/bpf-uapi";
import type { MapSpec } from "../loader/elf";
import { BpfMap } from "../loader/maps";
import { u32Key } from "../loader/struct";
import {
  DIRECT_FLOW,
  DIRECT_STATS,
  DIRECT_TABLE_SIZE,
  decodeFlowKey,
  FLOW_KEY,
  FLOW_OWNER,
  FLOW_POOL,
  type FlowKey,
  type FlowStats,
  ifindexKey,
  MAX_ENDPOINTS,
} from "./abi";

/** What every endpoint's table looks like; also nkc_flow_tables' inner-map template. */
export const DIRECT_TABLE_SPEC: MapSpec = {
  name: "nkc_ep_flows",
  type: BPF_MAP_TYPE.LRU_HASH,
  keySize: FLOW_KEY.size,
  valueSize: DIRECT_FLOW.size,
  maxEntries: DIRECT_TABLE_SIZE,
  flags: 0,
};

/** How many tables the pool adds when none is free: one grace period for all of them. */
export const POOL_GROWTH = 16;

/** The three pinned maps of the pool (bpf/lib/direct.h). */
export interface FlowTableMaps {
  /** nkc_flow_tables: slot → table. */
  tables: BpfMap;
  /** nkc_flow_owner: host ifindex → { slot, generation }. */
  owners: BpfMap;
  /** nkc_flow_pool: how many slots hold a table, the last generation handed out. */
  pool: BpfMap;
  /** The tables' own spec when they are not direct-flow tables (NetworkPolicy's, policy/ct.ts). */
  spec?: MapSpec;
}

interface Owner {
  slot: number;
  gen: bigint;
}

interface Pool {
  tables: number;
  lastGen: bigint;
}

/** nkc_flow_pool is an array of one. */
const POOL_KEY = u32Key(0);
/** Owner records read per batch call: a node's pods usually fit in one. */
const OWNER_CHUNK = 256;

/**
 * Gives the endpoint a table of its own under a new generation: never entries that a
 * previous holder of the table, or of the ifindex (a pod whose DEL never came), wrote.
 * Callers hold the node lock (datapath/fastpath.ts), so no two ADDs pick the same slot.
 */
export function createFlowTable(maps: FlowTableMaps, hostIfindex: number): void {
  maps.owners.delete(ifindexKey(hostIfindex));
  const pool = readPool(maps.pool);
  const used = new Set(ownerRecords(maps.owners).map(([, o]) => o.slot));
  let slot = firstFree(pool.tables, used);
  if (slot === undefined) {
    slot = pool.tables;
    pool.tables = growPool(maps, pool.tables);
  }
  pool.lastGen += 1n;
  // The generation is spent before anyone can write under it: a crash between the two
  // writes only skips one.
  writePool(maps.pool, pool);
  withSlotTable(maps, slot, drain);
  maps.owners.update(ifindexKey(hostIfindex), encodeOwner({ slot, gen: pool.lastGen }));
}

/** How many slots of the pool hold a table (`status`, tests), from nkc_flow_pool. */
export function filledSlots(pool: BpfMap): number {
  return readPool(pool).tables;
}

export interface RememberedFlow extends FlowKey {
  /** bpf_ktime_get_ns() of the flow's last opening packet. */
  openedNs: bigint;
}

/** The flows the endpoint's table holds for it, or undefined when it has no table. */
export function listEndpointFlows(maps: FlowTableMaps, hostIfindex: number): RememberedFlow[] | undefined {
  return withEndpointTable(maps, hostIfindex, (table, gen) =>
    tableEntries(table).flatMap(([key, value]) => {
      const flow = DIRECT_FLOW.decode(value);
      return flow.gen === gen ? [{ ...decodeFlowKey(key), openedNs: flow.openedNs }] : [];
    }),
  );
}

/** How many flows the endpoint's table holds for it, or undefined when it has no table. */
export function flowTableSize(maps: FlowTableMaps, hostIfindex: number): number | undefined {
  return listEndpointFlows(maps, hostIfindex)?.length;
}

/** Runs `fn` on the endpoint's table with the generation its entries must carry;
 * undefined when the endpoint holds none. */
export function withEndpointTable<T>(
  maps: FlowTableMaps,
  hostIfindex: number,
  fn: (table: BpfMap, gen: bigint) => T,
): T | undefined {
  const raw = maps.owners.lookup(ifindexKey(hostIfindex));
  if (!raw) return undefined;
  const owner = decodeOwner(raw);
  return withSlotTable(maps, owner.slot, (table) => fn(table, owner.gen));
}

/** Runs `fn` on the table in `slot`; a lookup in a map of maps gives the inner map's id. */
function withSlotTable<T>(maps: FlowTableMaps, slot: number, fn: (table: BpfMap) => T): T | undefined {
  const id = maps.tables.lookup(u32Key(slot));
  if (!id) return undefined;
  let fd: number;
  try {
    fd = mapGetFdById(id.readUInt32LE(0));
  } catch {
    return undefined; // replaced meanwhile
  }
  const table = new BpfMap(fd, maps.spec ?? DIRECT_TABLE_SPEC);
  try {
    return fn(table);
  } finally {
    table.close();
  }
}

/**
 * Puts POOL_GROWTH new tables into the slots after the last filled one, in one batch (one
 * grace period); returns the new number of filled slots.
 */
function growPool(maps: FlowTableMaps, filled: number): number {
  const { tables } = maps;
  const count = Math.min(POOL_GROWTH, MAX_ENDPOINTS - filled);
  if (count <= 0) throw new Error(`every one of the ${MAX_ENDPOINTS} flow tables is in use`);
  const created: BpfMap[] = [];
  try {
    const keys = Buffer.alloc(4 * count);
    const fds = Buffer.alloc(4 * count);
    for (let i = 0; i < count; i++) {
      const table = BpfMap.create(maps.spec ?? DIRECT_TABLE_SPEC);
      created.push(table);
      keys.writeUInt32LE(filled + i, 4 * i);
      fds.writeUInt32LE(table.fd, 4 * i);
    }
    try {
      mapUpdateBatch(tables.fd, keys, fds, count, 0);
    } catch (e) {
      // Kernels without batch updates for arrays of maps: the one table this ADD needs.
      if (!(e instanceof BpfError && (e.code === "EINVAL" || e.code === "ENOTSUPP" || e.code === "EOPNOTSUPP"))) {
        throw e;
      }
      tables.update(u32Key(filled), fds.subarray(0, 4));
      return filled + 1;
    }
    return filled + count;
  } finally {
    for (const t of created) t.close(); // the slots hold the references now
  }
}

function firstFree(filled: number, used: ReadonlySet<number>): number | undefined {
  for (let slot = 0; slot < filled; slot++) if (!used.has(slot)) return slot;
  return undefined;
}

/** Deletes every entry of `table`, a chunk of a thousand per call. */
function drain(table: BpfMap): void {
  const { keySize, valueSize, maxEntries } = table.spec;
  mapLookupBatch(table.fd, keySize, valueSize, { andDelete: true, chunk: maxEntries, keep: false });
}

/** Every entry of `table`, read in one batch. */
export function tableEntries(table: BpfMap): [Buffer, Buffer][] {
  const { keySize, valueSize, maxEntries } = table.spec;
  const { keys, values } = mapLookupBatch(table.fd, keySize, valueSize, { chunk: maxEntries });
  return keys.map((k, i) => [k, values[i] as Buffer]);
}

/** The host ifindexes of the endpoints that hold a table. */
export function tableHolders(maps: FlowTableMaps): number[] {
  return ownerRecords(maps.owners).map(([ifindex]) => ifindex);
}

function ownerRecords(owners: BpfMap): [number, Owner][] {
  const { keys, values } = mapLookupBatch(owners.fd, 4, FLOW_OWNER.size, { chunk: OWNER_CHUNK });
  return keys.map((k, i) => [k.readUInt32LE(0), decodeOwner(values[i] as Buffer)]);
}

function readPool(pool: BpfMap): Pool {
  const { tables, lastGen } = FLOW_POOL.decode(pool.lookup(POOL_KEY) ?? Buffer.alloc(FLOW_POOL.size));
  return { tables, lastGen };
}

function writePool(pool: BpfMap, p: Pool): void {
  pool.update(POOL_KEY, FLOW_POOL.encode(p));
}

const encodeOwner = (o: Owner): Buffer => FLOW_OWNER.encode(o);

function decodeOwner(v: Buffer): Owner {
  const { slot, gen } = FLOW_OWNER.decode(v);
  return { slot, gen };
}

/** nkc_direct_stats of one endpoint, summed over CPUs (zero when it has none). */
export function readFlowStats(stats: BpfMap, hostIfindex: number): FlowStats {
  const sum: FlowStats = { remembered: 0n, forgotten: 0n };
  for (const cpu of stats.lookupPerCpu(ifindexKey(hostIfindex)) ?? []) {
    const { remembered, forgotten } = DIRECT_STATS.decode(cpu);
    sum.remembered += remembered;
    sum.forgotten += forgotten;
  }
  return sum;
}
