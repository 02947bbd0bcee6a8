/**
 * Service translation as `status` shows it: the links pinned under svc/ (eight per
 * cgroup), the pods whose sockets are translated, the Services and backends the tables
 * hold, and what the programs counted. Read-only: the maps are opened, never changed.
 */
import * as fs from "node:fs";
import {
  openSvcMaps,
  readSvcCounters,
  SocketCloser,
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
  /** Why this kernel cannot close a withdrawn backend's sockets (so the agent refuses
   * --service-translation); asked only where translation runs. Absent: it can. */
  socketClosing: string | undefined;
}

export function serviceTranslationStatus(root: string): ServiceTranslationStatus {
  const dir = svcRoot(root);
  const links = fs.existsSync(dir)
    ? fs.readdirSync(dir).filter((name) => `${dir}/${name}` !== svcProgramsRoot(root)).length
    : 0;
  const maps = openSvcMaps(root);
  const socketClosing = links > 0 ? socketClosingUnavailable() : undefined;
  if (!maps) return { links, pods: 0, services: 0, backends: 0, counters: undefined, socketClosing };
  try {
    return {
      links,
      pods: svcPodIfindexes(maps).length,
      services: maps.services.countKeys(),
      backends: maps.backends.countKeys(),
      counters: asNumbers(readSvcCounters(maps.stats)),
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
