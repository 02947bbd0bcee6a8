/**
 * Each pod's table of the flows its NetworkPolicy let through (bpf/lib/policy.h): an LRU
 * keyed like the direct-flow tables (struct nkc_flow_key), so one pod's flows only ever
 * evict its own. Pooled the same way (nkc_pol_ct_tables, nkc_pol_ct_owner,
 * nkc_pol_ct_pool) and for the same reason: a table put into a map of maps costs an
 * RCU grace period.
 */
import { BPF_MAP_TYPE } from "../../sys/bpf-uapi";
import { FLOW_KEY } from "../fastpath/abi";
import type { MapSpec } from "../loader/elf";
import { POL_CT, POLICY_CT_SIZE } from "./abi";

/** What every pod's table looks like; also nkc_pol_ct_tables' inner-map template. */
export const POLICY_CT_SPEC: MapSpec = {
  name: "nkc_pol_ct",
  type: BPF_MAP_TYPE.LRU_HASH,
  keySize: FLOW_KEY.size,
  valueSize: POL_CT.size,
  maxEntries: POLICY_CT_SIZE,
  flags: 0,
};
