/**
 * The node's side of the eBPF fast path, as ADD sets it up before it attaches a pod:
 * pinned maps, the newest build's programs, the uplink's ingress link and, for
 * NetworkPolicy, its egress link (and the same on the agent's WireGuard device), the
 * socket bypass's and Service translation's links. Made once and reused; the ADD that
 * loads a new build moves every existing pod's links onto it, and an uplink link running
 * an older program is switched with BPF_LINK_UPDATE, never detached.
 *
 * Every change to node-wide state and to the endpoint map happens under the node lock
 * (withNodeLock), so that ADDs on a fresh node agree, a build never swaps programs under
 * another's feet, and pruning dead entries cannot remove an entry an ADD has just
 * written. The pod's own part: fastpath.ts; the pin layout: bpf/layout.ts; reading
 * that state without changing it: node-state.ts; this build's objects: assets.ts.
 */

import * as fs from "node:fs";
import * as path from "node:path";
import {
  attachTcx,
  BpfLink,
  type BpfProgram,
  endpointPin,
  ensureBpffsRoot,
  FROM_POD_PIN,
  INGRESS_LIMIT_PIN,
  loadNodePrograms,
  type NodePrograms,
  POLICY_PIN,
  PROGRAM_NAMES,
  programName,
  uplinkPin,
} from "../bpf/index";
import type { NatCheckChoice, PodHook } from "../cni/config";
import { CniError, ErrorCode } from "../cni/errors";
import { log } from "../log";
import { LockTimeoutError, withFileLock, withFileLockAsync } from "../sys/file-lock";
import { mkdirs } from "../sys/mkdirs";
import { sha256Hex } from "../sys/sha256";
import { embeddedObjects, embeddedSockObject, embeddedSvcObject } from "./assets";
import { pinnedEndpointDevices } from "./node-state";
import { ensureServiceTranslation } from "./service-translation";
import { clearSockBypassOff, ensureSockBypass, noteSockBypassOff } from "./sockbypass";
import type { Uplink } from "./uplink";

const LOCK_DIR = "/run/netkit-cni";
const NODE_LOCK_TIMEOUT_MS = 10_000;

/** A network's fast path as its config says (`fastPath`, and the network's name). */
export interface FastPathSettings {
  /** False: the pod gets only the source check (no redirects, no uplink program). */
  enabled: boolean;
  bpffsRoot: string;
  network: string;
  clusterCidrs: string[];
  natCheck: NatCheckChoice;
  /** Same-node socket bypass (sockbypass.ts); absent = off. */
  sockBypass?: boolean;
  sockBypassCgroup?: string | undefined;
  /** Service translation (service-translation.ts); absent = off. */
  serviceTranslation?: boolean;
  serviceTranslationCgroup?: string | undefined;
  /** NetworkPolicy (bpf/lib/policy.h); absent = off. */
  networkPolicy?: boolean;
  /** Where a veth pod's programs run (pod-filters.ts); absent = tcx links. */
  podHook?: PodHook;
}

/** One lock per bpffs root, outside the bpffs (which holds no regular files). */
export const nodeLockPath = (root: string) => path.join(LOCK_DIR, `node-${sha256Hex([root], 12)}.lock`);

/**
 * Runs `fn` holding the node lock of the bpffs root `root`: every change to node-wide eBPF
 * state and to the endpoint map happens inside one. An ADD holds it once, across
 * ensureNodeDatapath and attachPod; DEL's and GC's removals take it themselves
 * (fastpath.ts). Busy for longer than NODE_LOCK_TIMEOUT_MS: code 11, try again later.
 */
export function withNodeLock<T>(root: string, fn: () => T): T {
  mkdirs(LOCK_DIR, 0o700);
  try {
    return withFileLock(nodeLockPath(root), NODE_LOCK_TIMEOUT_MS, fn);
  } catch (e) {
    throw busyOrThrown(e);
  }
}

/** withNodeLock for a hold that makes netlink requests (tc filters, pod-filters.ts). */
export async function withNodeLockAsync<T>(root: string, fn: () => Promise<T>): Promise<T> {
  mkdirs(LOCK_DIR, 0o700);
  try {
    return await withFileLockAsync(nodeLockPath(root), NODE_LOCK_TIMEOUT_MS, fn);
  } catch (e) {
    throw busyOrThrown(e);
  }
}

function busyOrThrown(e: unknown): unknown {
  return e instanceof LockTimeoutError
    ? new CniError(ErrorCode.TryAgainLater, `node datapath is busy: ${e.message}; try again later`)
    : e;
}

/**
 * Opens (or creates) the node's datapath, to be called under the node lock: the maps and
 * the newest build's programs (loaded and pinned by the first ADD of a build, conntrack
 * variant first), the uplink's links, and with them the socket bypass and Service
 * translation where the network asks for them. The ADD that loads a new build also moves
 * every existing pod's links onto it (its caller, ADD, then moves the pods' tc filters:
 * pod-filters.ts), so one node never mixes two builds' ideas of which flows are direct. A superseded build (an older executable still running during an upgrade)
 * uses the newer build's programs and leaves node-wide links alone.
 *
 * Returns the node's programs and maps for attachPod; the caller closes them. A failure
 * closes them itself.
 */
export function ensureNodeDatapath(settings: FastPathSettings, uplink: Uplink | undefined): NodePrograms {
  const root = settings.bpffsRoot;
  ensureBpffsRoot(root);
  const natChecks = settings.natCheck === "auto" ? undefined : [settings.natCheck];
  const node = loadNodePrograms(root, embeddedObjects(), { ...settings, natChecks });
  try {
    if (node.loaded) {
      log.info(`datapath: loaded programs, NAT check "${node.natCheck}"`);
      for (const why of node.skippedVariants) log.info(`datapath: ${why}`);
    } else if (natChecks && !natChecks.includes(node.natCheck)) {
      log.warn(`datapath: "natCheck": "${settings.natCheck}" asked, but the node runs "${node.natCheck}"`);
    }
    if (!node.superseded) {
      // A network without the fast path leaves the uplink to those that have it.
      if (uplink && settings.enabled) {
        attachUplink(root, uplink, "ingress", node.programs.hostIn);
        // The agent's WireGuard device (--encryption): decrypted traffic takes the same way in.
        if (uplink.wireguard) attachUplink(root, uplink.wireguard, "ingress", node.programs.wgIn);
      }
      // NetworkPolicy's last look at a pod's packet leaving the node (a Service flow
      // the DNAT sent to another node's backend), with or without the fast path; with
      // encryption such a packet leaves through the WireGuard device, not the uplink.
      if (uplink && settings.networkPolicy) {
        attachUplink(root, uplink, "egress", node.programs.hostOut);
        if (uplink.wireguard) attachUplink(root, uplink.wireguard, "egress", node.programs.wgOut);
      }
      if (node.loaded) switchEndpoints(root, node);
    }
    if (settings.sockBypass) {
      try {
        ensureSockBypass(root, embeddedSockObject(), node.maps.endpoints, settings.sockBypassCgroup);
        clearSockBypassOff(root, settings.sockBypassCgroup);
      } catch (e) {
        // Optional: the pod works without it, on the packet path.
        const reason = (e as Error).message.split("\n")[0] ?? "unknown";
        log.warn(`socket bypass off: ${reason}`);
        noteSockBypassOff(root, { cgroup: settings.sockBypassCgroup, reason });
      }
    }
    if (settings.serviceTranslation) {
      ensureServiceTranslation(root, embeddedSvcObject(), settings.serviceTranslationCgroup);
    }
    return node;
  } catch (e) {
    node.close();
    throw e;
  }
}

/** Attaches `program` to the uplink, or switches an existing link to it atomically. */
export function attachUplink(root: string, uplink: Uplink, direction: "ingress" | "egress", program: BpfProgram): void {
  const pin = uplinkPin(root, uplink.name, direction);
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

/** The host ifindexes of the endpoint map's veth pods: those whose programs may be tc
 * filters (pod-filters.ts's switchPodFilters moves them onto a new build). */
export function vethEndpoints(node: Pick<NodePrograms, "endpoints">): number[] {
  return [...node.endpoints.list().values()].filter((e) => e.datapath === "veth").map((e) => e.hostIfindex);
}

/**
 * Points every pod's pinned link at this build's program of the same kind (the fast
 * path's, the source check's, the ingress limit's) with BPF_LINK_UPDATE: the program is
 * replaced in place, with no moment without one.
 */
export function switchEndpoints(root: string, node: Pick<NodePrograms, "programs">): void {
  const { fromPod, sourceCheck, podIngress, podPolicy } = node.programs;
  const ours = new Set([fromPod.id(), sourceCheck.id(), podIngress.id(), podPolicy.id()]);
  const byKind = new Map([
    [PROGRAM_NAMES.podIngress, podIngress],
    [PROGRAM_NAMES.sourceCheck, sourceCheck],
    [PROGRAM_NAMES.podPolicy, podPolicy],
  ]);
  for (const dev of pinnedEndpointDevices(root)) {
    for (const name of [FROM_POD_PIN, INGRESS_LIMIT_PIN, POLICY_PIN]) {
      const pin = endpointPin(root, dev, name);
      if (!fs.existsSync(pin)) continue;
      const link = BpfLink.openPinned(pin);
      try {
        const running = link.programId();
        if (ours.has(running)) continue;
        const kind = programName(running);
        link.update(byKind.get(kind as never) ?? fromPod);
      } catch (e) {
        // A link whose device is gone is GC's to remove; the other pods still move.
        log.warn(`endpoint ${dev}: cannot switch ${name} to this build's program: ${(e as Error).message}`);
      } finally {
        link.close();
      }
    }
  }
}
