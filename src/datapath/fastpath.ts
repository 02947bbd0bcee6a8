/**
 * The eBPF fast path of one node, as the verbs use it. Node-wide state (pinned maps,
 * this version's programs, the uplink's ingress/egress links) is made once and reused,
 * under a lock file so concurrent ADDs on a fresh node agree; an uplink link running an
 * older program is switched with BPF_LINK_UPDATE, never detached. Per endpoint: the
 * pod's addresses in the endpoint map and its one link pinned under
 * `<bpffsRoot>/endpoints/<host device>/`.
 *
 * Pin layout:  <root>/maps/nkc_*   <root>/programs/<version>/nkc_*
 *              <root>/uplink/<ifname>/{ingress,egress}   <root>/endpoints/<host device>/from_pod
 */
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { EndpointMap } from "../bpf/endpoints";
import {
  attachNetkit,
  attachTcx,
  BpfLink,
  type BpfProgram,
  type Counters,
  deleteCounters,
  type EndpointMaps,
  ensureBpffs,
  isBpffs,
  loadNodePrograms,
  type NodePrograms,
  openNodeMaps,
  readCounters,
} from "../bpf/index";
import { CniError, ErrorCode } from "../cni/errors";
import { log } from "../log";
import { LockTimeoutError, withFileLock } from "../sys/file-lock";
import { mkdirs } from "../sys/mkdirs";
import { readAsset } from "../sys/sea-assets";
import { hostPrefix } from "./pod-end";
import type { DeviceKind } from "./types";

const LOCK_DIR = "/run/netkit-cni";
const NODE_LOCK_TIMEOUT_MS = 10_000;

export interface FastPathSettings {
  bpffsRoot: string;
  network: string;
  clusterCidrs: string[];
}

export interface Uplink {
  name: string;
  index: number;
  mtu?: number;
  gsoMaxSize?: number;
  groMaxSize?: number;
}

/** The endpoint as the fast path sees it. */
export interface FastPathEndpoint {
  hostDevice: string;
  hostIfindex: number;
  kind: DeviceKind;
  addresses: string[];
}

const endpointDir = (root: string, hostDevice: string) => path.join(root, "endpoints", hostDevice);
/** Pods added by older versions also have a to_pod pin; DEL and GC remove the directory. */
const ENDPOINT_PINS = ["from_pod"] as const;

/** One lock per bpffs root, outside the bpffs (which holds no regular files). */
export const nodeLockPath = (root: string) =>
  path.join(LOCK_DIR, `node-${createHash("sha256").update(root).digest("hex").slice(0, 12)}.lock`);

function underNodeLock<T>(root: string, fn: () => T): T {
  mkdirs(LOCK_DIR, 0o700);
  try {
    return withFileLock(nodeLockPath(root), NODE_LOCK_TIMEOUT_MS, fn);
  } catch (e) {
    if (e instanceof LockTimeoutError) {
      throw new CniError(ErrorCode.TryAgainLater, `node datapath is busy: ${e.message}; try again later`);
    }
    throw e;
  }
}

/** /sys/fs/bpf itself may be unmounted (minimal hosts); a root inside it needs it mounted. */
function ensureRoot(root: string): void {
  if (root.startsWith("/sys/fs/bpf/") && !isBpffs("/sys/fs/bpf")) ensureBpffs("/sys/fs/bpf");
  ensureBpffs(root);
}

export const embeddedObjects = () => ({
  lxc: readAsset("bpf_lxc.o", "bpf/bpf_lxc.o"),
  host: readAsset("bpf_host.o", "bpf/bpf_host.o"),
});

export class NodeFastPath {
  private constructor(
    private readonly node: NodePrograms,
    readonly root: string,
  ) {}

  /**
   * Opens the node's datapath, creating what is missing: maps, this version's programs,
   * and (when an uplink is known) its ingress and egress links. The ADD that loads a new
   * build also moves every existing pod onto it, so one node never mixes two versions'
   * ideas of which flows are safe to redirect.
   */
  static open(settings: FastPathSettings, uplink: Uplink | undefined): NodeFastPath {
    const root = settings.bpffsRoot;
    return underNodeLock(root, () => {
      ensureRoot(root);
      const node = loadNodePrograms(root, embeddedObjects(), settings);
      try {
        if (uplink) {
          attachUplink(root, uplink, "ingress", node.programs.hostIn);
          attachUplink(root, uplink, "egress", node.programs.hostOut);
        }
        if (node.loaded) switchEndpoints(root, node.programs.fromPod);
        return new NodeFastPath(node, root);
      } catch (e) {
        node.close();
        throw e;
      }
    });
  }

  close(): void {
    this.node.close();
  }

  /**
   * Puts the pod's addresses in the endpoint map and attaches + pins its program: one link
   * (what the pod sends), since each link costs an RCU grace period under RTNL on attach
   * and again on delete. The caller registers `detachEndpoint` as the undo.
   */
  attachEndpoint(ep: FastPathEndpoint): void {
    const dir = endpointDir(this.root, ep.hostDevice);
    const { fromPod } = this.node.programs;
    const link =
      ep.kind === "netkit"
        ? attachNetkit(fromPod, ep.hostIfindex, "peer")
        : attachTcx(fromPod, ep.hostIfindex, "ingress");
    try {
      // Pins left by an ADD that was killed before it could clean up name a dead device.
      unpinEndpoint(this.root, ep.hostDevice);
      link.pin(path.join(dir, "from_pod"));
    } finally {
      link.close();
    }
    // Addresses last: the programs must be in place before traffic is steered here.
    for (const cidr of ep.addresses) {
      this.node.endpoints.upsert(hostPrefix(cidr).address, { hostIfindex: ep.hostIfindex, datapath: ep.kind });
    }
  }

  readCounters(hostIfindex: number): Counters {
    return this.node.readCounters(hostIfindex);
  }
}

/** Attaches `program` to the uplink, or switches an existing link to it atomically. */
export function attachUplink(root: string, uplink: Uplink, direction: "ingress" | "egress", program: BpfProgram): void {
  const pin = path.join(root, "uplink", uplink.name, direction);
  if (fs.existsSync(pin)) {
    const link = BpfLink.openPinned(pin);
    try {
      if (link.programId() === program.id()) return;
      link.update(program);
      log.info(`uplink ${uplink.name} ${direction}: switched to program ${program.id()}`);
      return;
    } catch (e) {
      // A link whose device went away (renamed NIC, new ifindex) cannot be updated: re-create.
      log.warn(`uplink ${uplink.name} ${direction}: pinned link unusable (${(e as Error).message}); re-attaching`);
    } finally {
      link.close();
    }
    fs.unlinkSync(pin);
  }
  const link = attachTcx(program, uplink.index, direction);
  try {
    link.pin(pin);
  } finally {
    link.close();
  }
  log.info(`uplink ${uplink.name} ${direction}: attached ${program.name}`);
}

/**
 * Points every pod's pinned link at `fromPod` with BPF_LINK_UPDATE: the program is replaced
 * in place, with no moment without one. Pods added by older builds also have a to_pod
 * link; it only records flows, and goes at DEL.
 */
export function switchEndpoints(root: string, fromPod: BpfProgram): void {
  const id = fromPod.id();
  for (const dev of pinnedEndpointDevices(root)) {
    const pin = path.join(endpointDir(root, dev), "from_pod");
    if (!fs.existsSync(pin)) continue;
    const link = BpfLink.openPinned(pin);
    try {
      if (link.programId() !== id) link.update(fromPod);
    } catch (e) {
      // A link whose device is gone is GC's to remove; the other pods still move.
      log.warn(`endpoint ${dev}: cannot switch to program ${id}: ${(e as Error).message}`);
    } finally {
      link.close();
    }
  }
}

/**
 * Removes an endpoint's pins, its map entries and counters. Safe to repeat and safe when
 * the node has no fast path state at all. The common case (DEL with prevResult, device
 * still there) deletes by address without scanning the map. Without addresses the map is
 * scanned for the device's ifindex; with the device already gone (its netns vanished)
 * its ifindex is unknown, so every entry whose device no longer exists is pruned, since a
 * gone device's ifindex will be handed to another device. `liveIfindexes` is asked for
 * only then.
 */
export async function removeEndpoint(
  root: string,
  hostDevice: string,
  gone: { hostIfindex: number | undefined; addresses: string[] },
  liveIfindexes: () => Promise<ReadonlySet<number>>,
): Promise<void> {
  unpinEndpoint(root, hostDevice);
  if (!fs.existsSync(path.join(root, "maps"))) return;
  const live = gone.hostIfindex === undefined ? await liveIfindexes() : undefined;
  withNodeMaps(root, (maps) => {
    const endpoints = new EndpointMap(maps.endpoints);
    for (const cidr of gone.addresses) {
      const ip = hostPrefix(cidr).address;
      const entry = endpoints.get(ip);
      // Another pod may hold the address by now; only our device's (or a dead one's) entry goes.
      if (entry && (entry.hostIfindex === gone.hostIfindex || (live && !live.has(entry.hostIfindex)))) {
        endpoints.delete(ip);
      }
    }
    if (gone.hostIfindex !== undefined) {
      if (gone.addresses.length === 0) {
        for (const [ip, entry] of endpoints.list()) if (entry.hostIfindex === gone.hostIfindex) endpoints.delete(ip);
      }
      deleteCounters(maps.counters, gone.hostIfindex);
    }
    if (live) pruneDead(maps, live);
  });
}

/** Removes an endpoint's link pins; with them go the links (and so the attachments). */
export function unpinEndpoint(root: string, hostDevice: string): void {
  fs.rmSync(endpointDir(root, hostDevice), { recursive: true, force: true });
}

/** GC's half: drops endpoint entries and counters of devices that no longer exist. */
export function pruneDeadEndpoints(root: string, live: ReadonlySet<number>): string[] {
  return withNodeMaps(root, (maps) => pruneDead(maps, live)) ?? [];
}

function pruneDead(maps: EndpointMaps, live: ReadonlySet<number>): string[] {
  const removed: string[] = [];
  const endpoints = new EndpointMap(maps.endpoints);
  for (const [ip, entry] of endpoints.list()) {
    if (!live.has(entry.hostIfindex) && endpoints.delete(ip)) removed.push(ip);
  }
  for (const key of [...maps.counters.keys()]) {
    if (!live.has(key.readUInt32LE(0))) maps.counters.delete(key);
  }
  return removed;
}

/** Runs `fn` with the pinned maps, or returns undefined when the node has none yet. */
function withNodeMaps<T>(root: string, fn: (maps: EndpointMaps) => T): T | undefined {
  if (!fs.existsSync(path.join(root, "maps"))) return undefined;
  const maps = openNodeMaps(root);
  try {
    return fn(maps);
  } finally {
    maps.close();
  }
}

/** Which endpoint pins and map entries exist (for CHECK and GC). */
export function endpointState(root: string, hostDevice: string): { pinned: boolean } {
  return { pinned: ENDPOINT_PINS.every((p) => fs.existsSync(path.join(endpointDir(root, hostDevice), p))) };
}

export function endpointMapEntries(root: string): Map<string, { hostIfindex: number; datapath: DeviceKind }> {
  return withNodeMaps(root, (maps) => new EndpointMap(maps.endpoints).list()) ?? new Map();
}

export function pinnedEndpointDevices(root: string): string[] {
  const dir = path.join(root, "endpoints");
  return fs.existsSync(dir) ? fs.readdirSync(dir) : [];
}

export function countersOf(root: string, hostIfindex: number): Counters | undefined {
  return withNodeMaps(root, (maps) => readCounters(maps.counters, hostIfindex));
}
