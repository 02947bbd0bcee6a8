/**
 * The public face of src/bpf: what the datapath and commands use. Nothing here but
 * re-exports, so callers do not depend on the module layout below.
 */
export type { CounterName, Counters, Flow } from "./abi";
export { COUNTER_NAMES, MAP_NAMES, PROGRAM_NAMES } from "./abi";
export { listClusterCidrs, setNetworkClusterCidrs } from "./cluster";
export { deleteCounters, readCounters } from "./counters";
export { type MapSpec, type ObjectSpec, type ProgramSpec, readObject } from "./elf";
export { type Endpoint, EndpointMap } from "./endpoints";
export { clearPathMemory, listClients, listFlows } from "./flows";
export { attachNetkit, attachTcx, BpfLink, type NetkitHook, type TcxDirection } from "./links";
export { BpfMap } from "./maps";
export {
  type EndpointMaps,
  loadNodePrograms,
  mapsDir,
  type NodeMaps,
  type NodeObjects,
  type NodePrograms,
  type NodeProgramsOptions,
  OBJECT_FILES,
  openNodeMaps,
  readObjectsDir,
} from "./node";
export { ensureBpffs, isBpffs, openPin, pinExists, pinObject, unmountBpffs, unpin } from "./pins";
export { BpfProgram, loadProgram } from "./programs";
export { type TestRunInput, type TestRunOutput, testRun } from "./test-run";
