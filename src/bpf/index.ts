/**
 * The public face of src/bpf: what the datapath and commands use. Nothing here but
 * re-exports, so callers do not depend on the module layout below.
 */
export type { BandwidthMode, IngressMode } from "./bandwidth/abi";
export {
  deletePodLimits,
  type EgressEnforcement,
  type IngressEnforcement,
  limitMismatches,
  type PodLimits,
  podLimits,
  setPodLimits,
} from "./bandwidth/limits";
export type { CounterName, Counters, DropReason, Drops, FlowKey, FlowStats } from "./fastpath/abi";
export { COUNTER_NAMES, DIRECT_TABLE_SIZE, DROP_REASONS, MAP_NAMES, PROGRAM_NAMES } from "./fastpath/abi";
export { setNetworkClusterCidrs } from "./fastpath/cluster";
export { readCounters, readDrops } from "./fastpath/counters";
export {
  createFlowTable,
  DIRECT_TABLE_SPEC,
  flowTableSize,
  listEndpointFlows,
  type RememberedFlow,
  readFlowStats,
} from "./fastpath/direct";
export { type EndpointEntry, EndpointMap } from "./fastpath/endpoints";
export { conntrackUnavailable } from "./fastpath/kernel-probe";
export { type MapSpec, type ObjectSpec, type ProgramSpec, readObject } from "./loader/elf";
export {
  ENDPOINT_PINS,
  endpointDir,
  endpointPin,
  endpointsRoot,
  FROM_POD_PIN,
  INGRESS_LIMIT_PIN,
  mapPin,
  mapsDir,
  POLICY_PIN,
  programsRoot,
  sockLinkPins,
  sockProgramsRoot,
  sockRoot,
  svcLinkPin,
  svcProgramsRoot,
  svcRoot,
  uplinkPin,
  uplinkRoot,
} from "./loader/layout";
export {
  attachCgroup,
  attachCgroupSockOps,
  attachCgroupSockRelease,
  attachNetkit,
  attachSkMsg,
  attachTcx,
  BpfLink,
  type NetkitHook,
  type TcxDirection,
} from "./loader/links";
export { BpfMap } from "./loader/maps";
export {
  ensureBpffs,
  ensureBpffsRoot,
  isBpffs,
  openPin,
  pinExists,
  pinObject,
  requireNodeBpffs,
  unpin,
} from "./loader/pins";
export { BpfProgram, loadProgram, programName, sectionAttachType } from "./loader/programs";
export {
  keepNodeObjectsOpen,
  loadNodePrograms,
  type NodeMaps,
  type NodePrograms,
  type NodeProgramsOptions,
  nodeMapsPinned,
  openNodeMaps,
  type ProgramSet,
  pinnedProgramSets,
} from "./node";
export { buildName, NAT_CHECKS, type NatCheck, type NodeObjects, nodeObjectsFrom } from "./objects";
export { type MapOccupancy, pinnedMapOccupancy } from "./occupancy";
export {
  forgetPodState,
  type GonePod,
  makePodState,
  type PodSpec,
  type PodStateMaps,
  podStateHolders,
  podStateMismatches,
  withPodStateMaps,
} from "./pod-state";
export {
  decodePolicyEvent,
  decodePolicyPod,
  decodeTierKey,
  decodeTierValue,
  POL_F_INCOMPLETE,
  POL_F_ISOLATED_IN,
  POL_F_ISOLATED_OUT,
  POL_F_PENDING,
  POL_F_WATCH,
  POL_RULE_NONE,
  POL_TIER_F_NETWORK_POLICY,
  POLICY_MAP_NAMES,
  type PolicyDir,
  type PolicyEvent,
  type PolicyPodEntry,
  type PolicyStats,
  type PolicyTier,
  type PolicyVerdictCount,
  podKeyBytes,
  TIER_ID,
  type TierValue,
  tierKey,
  tierValue,
  vipKey,
} from "./policy/abi";
export { type ByDirection, type CountedFlow, listCountedFlows, listNodeCountedFlows } from "./policy/ct";
export {
  applyTableWrites,
  deletePolicyPod,
  deleteTier,
  forgetPolicies,
  markPolicyPending,
  namespaceHasPolicies,
  namespaceKey,
  openOrCreatePolicyMaps,
  openOrCreatePolicyNamespaces,
  openPolicyMaps,
  type PolicyMaps,
  podKey,
  policyFlowTables,
  policyTableSlots,
  policyTierKeys,
  readFlowRecordsLost,
  readPolicyPod,
  readPolicyStats,
  readPolicyVerdicts,
  readTier,
  reconcileKeys,
  recordPolicyEndpoint,
  setFlowRecording,
  sweepPolicySlots,
  takeFlowEvents,
  writePolicyPod,
  writeTier,
} from "./policy/maps";
export {
  type DatapathRule,
  type SlotTables,
  samePorts,
  slotTables,
  slotWrites,
  type TableWrite,
} from "./policy/tables";
export {
  SOCK_MAP_NAMES,
  SOCK_PER_POD,
  SOCK_PROGRAM_NAMES,
  type SockCounters,
  type SockPod,
} from "./sock/abi";
export {
  type BypassedSocket,
  forgetSocketsOf,
  listBypassedSockets,
  loadSockPrograms,
  openSockMaps,
  readSockCounters,
  type SockMaps,
  type SockPrograms,
} from "./sock/objects";
export { readSockPod, recordSockPod, sockPodIfindexes } from "./sock/pods";
export {
  pairKey,
  SVC_MAP_NAMES,
  SVC_POD_AFFINITY,
  SVC_PROGRAM_NAMES,
  SVC_SOCK_SLOTS,
  type SvcBackend,
  type SvcClient,
  type SvcCounters,
  type SvcFrontend,
  type SvcHook,
  type SvcProtocol,
} from "./svc/abi";
export { SocketCloser } from "./svc/destroy";
export {
  forgetSvcPod,
  loadSvcPrograms,
  openOrCreateSvcMaps,
  openSvcMaps,
  readSvcClients,
  readSvcCounters,
  recordSvcPod,
  type SvcMaps,
  type SvcPrograms,
  svcPodIfindexes,
  svcTables,
} from "./svc/objects";
export { frontendText, type ServiceEntry, ServiceTable } from "./svc/table";
