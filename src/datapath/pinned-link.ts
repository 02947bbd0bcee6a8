/**
 * A node-wide link kept under a pin: created and pinned the first time, switched in place
 * (BPF_LINK_UPDATE, no moment without a program) when a newer build loads, never detached
 * by an ADD. The socket bypass's and Service translation's links are kept this way.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { BpfLink, type BpfProgram } from "../bpf/index";
import { log } from "../log";

/**
 * The pinned link switched to `program` (when `switchable`: not when the programs are a
 * newer build's), or a new one from `attach`, pinned. `label` names the feature in the log.
 */
export function ensurePinnedLink(
  label: string,
  pin: string,
  program: BpfProgram,
  switchable: boolean,
  attach: () => BpfLink,
): void {
  if (fs.existsSync(pin)) {
    const link = BpfLink.openPinned(pin);
    try {
      if (link.programId() === program.id() || !switchable) return;
      link.update(program);
      log.info(`${label}: ${path.basename(pin)} switched to program ${program.id()}`);
      return;
    } catch (e) {
      // A cgroup that was removed leaves a link that cannot be updated: attach anew.
      log.warn(`${label}: pinned ${path.basename(pin)} unusable (${(e as Error).message}); re-attaching`);
    } finally {
      link.close();
    }
    fs.rmSync(pin, { force: true });
  }
  const link = attach();
  try {
    link.pin(pin);
  } finally {
    link.close();
  }
  log.info(`${label}: attached ${program.name} (${path.basename(pin)})`);
}

/** `attach` run with the cgroup v2 directory `dir` open; the fd is closed after. */
export function onCgroup(dir: string, attach: (cgroupFd: number) => BpfLink): () => BpfLink {
  return () => {
    const fd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
    try {
      return attach(fd);
    } finally {
      fs.closeSync(fd);
    }
  };
}
