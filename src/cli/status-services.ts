/**
 * Service translation as `status` shows it: the links pinned under svc/ (eight per
 * cgroup), the pods whose sockets are translated, the Services and backends the tables
 * hold, and what the programs counted. Read-only: the maps are opened, never changed.
 */
import * as fs from "node:fs";
import {
  openSvcMaps,
  readSvcCounters,
  type SvcCounters,
  svcPodIfindexes,
  svcProgramsRoot,
  svcRoot,
} from "../bpf/index";

export interface ServiceTranslationStatus {
  /** Links pinned under svc/ (eight hooks per cgroup). */
  links: number;
  /** Pod attachments whose namespace is recorded (their sockets are translated). */
  pods: number;
  services: number;
  backends: number;
  counters: SvcCounters | undefined;
}

export function serviceTranslationStatus(root: string): ServiceTranslationStatus {
  const dir = svcRoot(root);
  const links = fs.existsSync(dir)
    ? fs.readdirSync(dir).filter((name) => `${dir}/${name}` !== svcProgramsRoot(root)).length
    : 0;
  const maps = openSvcMaps(root);
  if (!maps) return { links, pods: 0, services: 0, backends: 0, counters: undefined };
  try {
    return {
      links,
      pods: svcPodIfindexes(maps).length,
      services: maps.services.countKeys(),
      backends: maps.backends.countKeys(),
      counters: readSvcCounters(maps.stats),
    };
  } finally {
    maps.close();
  }
}
