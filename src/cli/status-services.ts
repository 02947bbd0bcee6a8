/**
 * Service translation as `status` shows it: the links pinned under svc/ (eight per
 * cgroup), the pods whose sockets are translated, the Services and backends the tables
 * hold, what the programs counted, and the pods' own state summed (each pod's is in
 * `endpoints`). Read-only: the maps are opened, never changed.
 */
import * as fs from "node:fs";
import {
  openSvcMaps,
  readSvcClients,
  readSvcCounters,
  SocketCloser,
  SVC_POD_AFFINITY,
  type SvcCounters,
  svcPodIfindexes,
  svcProgramsRoot,
  svcRoot,
} from "../bpf/index";
import { embeddedSvcDestroyObject } from "../datapath/assets";

export interface ServiceTranslationStatus {
  /** Links pinned under svc/ (eight hooks per cgroup). */
  links: number;
  /** Pod attachments whose namespace is recorded (their sockets are translated). */
  pods: number;
  services: number;
  backends: number;
  /** As numbers (a count never nears 2^53): `status --json` prints them. */
  counters: Record<keyof SvcCounters, number> | undefined;
  /** The pods' own state, summed: what each holds is its own and bounded per pod
   * (affinity: SVC_POD_AFFINITY Services), so nothing here is a shared capacity. */
  podState: PodsServiceState | undefined;
  /** Why this kernel cannot close a withdrawn backend's sockets (so the agent refuses
   * --service-translation); asked only where translation runs. Absent: it can. */
  socketClosing: string | undefined;
}

export interface PodsServiceState {
  /** Pods recorded by a build that made them no state of their own (until the next ADD,
   * DEL or GC of this build makes it): their sockets' affinity is left to the stack. */
  withoutState: number;
  affinityHeld: number;
  affinityPerPod: number;
  /** Sockets left to the stack: the kernel gave them no socket storage. */
  noSocketState: number;
  /** A socket's least recently used Service given up for another (its own). */
  socketReplaced: number;
  /** A pod's affinity to a Service given up for another Service (its own). */
  affinityReplaced: number;
}

export function serviceTranslationStatus(root: string): ServiceTranslationStatus {
  const dir = svcRoot(root);
  const links = fs.existsSync(dir)
    ? fs.readdirSync(dir).filter((name) => `${dir}/${name}` !== svcProgramsRoot(root)).length
    : 0;
  const maps = openSvcMaps(root);
  const socketClosing = links > 0 ? socketClosingUnavailable() : undefined;
  if (!maps)
    return { links, pods: 0, services: 0, backends: 0, counters: undefined, podState: undefined, socketClosing };
  try {
    const pods = svcPodIfindexes(maps).length;
    const clients = [...readSvcClients(maps).values()];
    const sum = (f: (c: (typeof clients)[number]) => bigint | number) => clients.reduce((n, c) => n + Number(f(c)), 0);
    return {
      links,
      pods,
      services: maps.services.countKeys(),
      backends: maps.backends.countKeys(),
      counters: asNumbers(readSvcCounters(maps.stats)),
      podState: {
        withoutState: pods - clients.length,
        affinityHeld: sum((c) => c.affinityHeld),
        affinityPerPod: SVC_POD_AFFINITY,
        noSocketState: sum((c) => c.noSocketState),
        socketReplaced: sum((c) => c.socketReplaced),
        affinityReplaced: sum((c) => c.affinityReplaced),
      },
      socketClosing,
    };
  } finally {
    maps.close();
  }
}

const asNumbers = (c: SvcCounters) =>
  Object.fromEntries(Object.entries(c).map(([k, v]) => [k, Number(v)])) as Record<keyof SvcCounters, number>;

/** Loading the socket iterators is the test: the kernel's own reason when it refuses. */
function socketClosingUnavailable(): string | undefined {
  try {
    SocketCloser.load(embeddedSvcDestroyObject()).dispose();
    return undefined;
  } catch (e) {
    return (e as Error).message.split("\n")[0];
  }
}
