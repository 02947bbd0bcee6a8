/** Picks the datapath implementation for a configured kind. */
import type { DatapathKind } from "../cni/config";
import type { Datapath } from "./types";
import { vethDatapath } from "./veth";

const DATAPATHS: Record<DatapathKind, Datapath> = { veth: vethDatapath };

export const datapathFor = (kind: DatapathKind): Datapath => DATAPATHS[kind];
