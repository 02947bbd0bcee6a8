/**
 * `netkit-cni status`, how full the eBPF maps are: every node-wide pinned map the
 * programs use (name, kind, entries, capacity), and the per-endpoint direct-flow tables
 * summed, with the fullest one named. Only those tables are LRU maps, so only they evict
 * (status shows what each evicted); a full map of any other kind refuses new entries.
 * Read-only.
 */
import { DIRECT_TABLE_SIZE, type MapOccupancy, pinnedMapOccupancy } from "../bpf/index";
import { parseOwnerAlias } from "../datapath/naming";
import { flowTableOf } from "../datapath/node-state";
import type { Link } from "../netlink/links";

/** The per-endpoint direct-flow tables (LRU, one per pod interface). */
export interface FlowTablesStatus {
  tables: number;
  capacityEach: number;
  entries: number;
  remembered: number;
  forgotten: number;
  evicted: number;
  /** The table holding the most flows (of equals, the one that evicted most); absent with no tables. */
  fullest: FullestTable | undefined;
}

export interface FullestTable {
  /** Its pod's host device (undefined: the device is gone). */
  device: string | undefined;
  ifindex: number;
  /** From the device's owner alias; undefined when it has none. */
  containerId: string | undefined;
  ifname: string | undefined;
  entries: number;
  capacity: number;
  evicted: number;
}

export interface MapsStatus {
  maps: MapOccupancy[];
  flowTables: FlowTablesStatus;
}

/**
 * The pinned maps under `bpffsRoot`, and the flow tables of the endpoints in the endpoint
 * map (`hostIfindexes`), their devices named from `byIndex`.
 */
export function mapsStatus(
  bpffsRoot: string,
  hostIfindexes: Iterable<number>,
  byIndex: ReadonlyMap<number, Link>,
): MapsStatus {
  const flowTables: FlowTablesStatus = {
    tables: 0,
    capacityEach: DIRECT_TABLE_SIZE,
    entries: 0,
    remembered: 0,
    forgotten: 0,
    evicted: 0,
    fullest: undefined,
  };
  for (const ifindex of new Set(hostIfindexes)) {
    const t = flowTableOf(bpffsRoot, ifindex);
    if (!t) continue;
    const evicted = Number(t.evicted);
    flowTables.tables += 1;
    flowTables.entries += t.entries;
    flowTables.remembered += Number(t.remembered);
    flowTables.forgotten += Number(t.forgotten);
    flowTables.evicted += evicted;
    const f = flowTables.fullest;
    if (!f || t.entries > f.entries || (t.entries === f.entries && evicted > f.evicted)) {
      const link = byIndex.get(ifindex);
      const owner = parseOwnerAlias(link?.alias);
      flowTables.fullest = {
        device: link?.name,
        ifindex,
        containerId: owner?.containerId,
        ifname: owner?.ifname,
        entries: t.entries,
        capacity: t.capacity,
        evicted,
      };
    }
  }
  return { maps: pinnedMapOccupancy(bpffsRoot), flowTables };
}
