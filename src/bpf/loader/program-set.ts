/**
 * One object's programs, pinned per build under `<setsDir>/<epoch>-<hash>/<program>`,
 * ordered by epoch as node.ts orders the node's: the newest complete build's pinned
 * programs are used and never replaced by an older build; this build's are loaded and
 * pinned only when no newer build's are, and then older builds' sets go (links still
 * holding their programs keep them alive until switched).
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { sha256Hex } from "../../sys/sha256";
import type { ObjectSpec } from "./elf";
import type { BpfMap } from "./maps";
import { openPin, replacePin } from "./pins";
import { BpfProgram, loadProgram } from "./programs";

export interface ProgramSetRequest {
  /** The directory holding the builds' sets. */
  setsDir: string;
  object: Buffer;
  spec: ObjectSpec;
  epoch: number;
  /** The programs the set must have (a set without one of them is incomplete, and ignored). */
  names: readonly string[];
  /** Maps by name, for loading. */
  maps: ReadonlyMap<string, BpfMap>;
}

export interface ProgramSet {
  programs: ReadonlyMap<string, BpfProgram>;
  /** `<epoch>-<hash>` of the programs in use. */
  build: string;
  /** True when this call loaded and pinned them. */
  loaded: boolean;
  /** True when they are a newer build's: this build must not switch links to its own. */
  superseded: boolean;
  close(): void;
}

const SET_NAME = /^(\d+)-[0-9a-f]+$/;

export interface PinnedSet {
  dir: string;
  epoch: number;
  build: string;
}

/** The builds' sets pinned under `setsDir` (a directory not named <epoch>-<hash> is none). */
function pinnedSets(setsDir: string): PinnedSet[] {
  if (!fs.existsSync(setsDir)) return [];
  return fs.readdirSync(setsDir).flatMap((build) => {
    const m = SET_NAME.exec(build);
    return m ? [{ dir: path.join(setsDir, build), epoch: Number(m[1]), build }] : [];
  });
}

function programSetBuild(object: Buffer, epoch: number): string {
  return `${epoch}-${sha256Hex([object], 16)}`;
}

export function loadProgramSet(request: ProgramSetRequest): ProgramSet {
  const { setsDir, epoch, names } = request;
  const build = programSetBuild(request.object, epoch);
  const complete = (set: PinnedSet) => names.every((name) => fs.existsSync(path.join(set.dir, name)));
  const sets = pinnedSets(setsDir).filter(complete);
  const newer = sets.filter((s) => s.epoch > epoch);
  const use =
    newer.length > 0 ? newer.reduce((a, b) => (b.epoch > a.epoch ? b : a)) : sets.find((s) => s.build === build);
  const programs = new Map<string, BpfProgram>();
  const close = () => {
    for (const program of programs.values()) program.close();
  };
  try {
    if (use) {
      for (const name of names) programs.set(name, new BpfProgram(openPin(path.join(use.dir, name)), name));
      return { programs, build: use.build, loaded: false, superseded: newer.length > 0, close };
    }
    for (const name of names) {
      const spec = request.spec.programs.find((p) => p.name === name);
      if (!spec) throw new Error(`program ${name} not found in the object`);
      programs.set(name, loadProgram(spec, { license: request.spec.license, maps: request.maps }));
    }
    const dir = path.join(setsDir, build);
    for (const program of programs.values()) replacePin(program.fd, path.join(dir, program.name));
    for (const set of pinnedSets(setsDir)) {
      if (set.build !== build && set.epoch <= epoch) fs.rmSync(set.dir, { recursive: true, force: true });
    }
    return { programs, build, loaded: true, superseded: false, close };
  } catch (e) {
    close();
    throw e;
  }
}
