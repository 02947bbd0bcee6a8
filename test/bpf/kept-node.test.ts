/**
 * The node's programs and maps kept open across verbs (bpf/kept-pins.ts), as the agent
 * that does handed verbs keeps them: served from one opening while their pins are the
 * ones opened, opened afresh when a pin is re-made (never the old object served under a
 * new pin), and the old descriptors closed once the last verb holding them lets go.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAP_NAMES, PROGRAM_NAMES } from "../../src/bpf/fastpath/abi";
import { mapPin } from "../../src/bpf/loader/layout";
import { BpfMap } from "../../src/bpf/loader/maps";
import { openPin, replacePin } from "../../src/bpf/loader/pins";
import {
  keepNodeObjectsOpen,
  loadNodePrograms,
  type NodePrograms,
  openNodeMaps,
  pinnedProgramSets,
} from "../../src/bpf/node";
import type { NodeObjects } from "../../src/bpf/objects";
import { buildObjects } from "./helpers/bpf-objects";
import { TestBpffs } from "./helpers/bpffs";
import { mapId } from "./helpers/flows";

let objects: NodeObjects;
let bpffs: TestBpffs;
let kept: { close(): void };
const OPTIONS = { clusterCidrs: ["10.244.0.0/16"], natChecks: ["memory" as const] };

const load = (): NodePrograms => loadNodePrograms(bpffs.root, objects, OPTIONS);
const openDescriptors = () => fs.readdirSync("/proc/self/fd").length;
/** The id of the program a descriptor holds (its fdinfo says it). */
const progId = (fd: number) =>
  Number(/^prog_id:\s*(\d+)$/m.exec(fs.readFileSync(`/proc/self/fdinfo/${fd}`, "utf8"))?.[1]);

/** The id of what a map pin holds now. */
function pinnedMapId(name: string): number {
  const map = BpfMap.openPinned(mapPin(bpffs.root, name));
  try {
    return mapId(map.fd);
  } finally {
    map.close();
  }
}

beforeAll(() => {
  objects = buildObjects();
  bpffs = TestBpffs.mount();
  kept = keepNodeObjectsOpen();
  // The first load of the build: loads, pins and keeps nothing (nothing was opened from pins).
  const first = load();
  expect(first.loaded).toBe(true);
  first.close();
}, 120_000);

afterAll(() => {
  kept?.close();
  bpffs?.release();
});

describe("the node's objects kept open across verbs", () => {
  it("are opened once and served again while their pins stay, after the verbs that used them closed them", () => {
    const a = load();
    const descriptors = openDescriptors();
    const b = load();
    // The same descriptors: nothing opened for the second verb.
    expect(b.programs.fromPod.fd).toBe(a.programs.fromPod.fd);
    expect(b.maps.endpoints.fd).toBe(a.maps.endpoints.fd);
    expect(openDescriptors()).toBe(descriptors);
    a.close();
    b.close();
    // Closed by both verbs, still open for the next.
    expect(mapId(a.maps.endpoints.fd)).toBe(pinnedMapId(MAP_NAMES.endpoints));
    const c = load();
    expect(c.maps.endpoints.fd).toBe(a.maps.endpoints.fd);
    c.close();
  });

  it("opens a map re-made under its name afresh, and closes the old descriptors when the last verb lets go", () => {
    const held = load();
    const oldMap = mapId(held.maps.endpoints.fd);
    const oldProgram = progId(held.programs.fromPod.fd);
    const before = openDescriptors();
    // A map gone from its pin: the next ADD makes it again and loads the programs against it.
    fs.rmSync(mapPin(bpffs.root, MAP_NAMES.endpoints));
    const reloaded = load();
    expect(reloaded.loaded).toBe(true);
    reloaded.close();
    const fresh = load();
    expect(fresh.loaded).toBe(false);
    expect(mapId(fresh.maps.endpoints.fd)).toBe(pinnedMapId(MAP_NAMES.endpoints));
    expect(mapId(fresh.maps.endpoints.fd)).not.toBe(oldMap);
    expect(progId(fresh.programs.fromPod.fd)).not.toBe(oldProgram);
    // The verb that still holds the old ones can finish with them.
    expect(mapId(held.maps.endpoints.fd)).toBe(oldMap);
    const withBoth = openDescriptors();
    expect(withBoth).toBeGreaterThan(before);
    held.close();
    // Every old descriptor closed: one set is open again, as before the change.
    expect(openDescriptors()).toBe(before);
    fresh.close();
  }, 120_000);

  it("opens a set whose program pins were replaced afresh", () => {
    const a = load();
    const oldProgram = progId(a.programs.fromPod.fd);
    a.close();
    const [set] = pinnedProgramSets(bpffs.root);
    if (!set) throw new Error("no pinned set");
    // Another program under the pin's name, as a set re-pinned by a crashed ADD's successor.
    const sourceCheck = path.join(set.dir, PROGRAM_NAMES.sourceCheck);
    const fromPod = path.join(set.dir, PROGRAM_NAMES.fromPod);
    const fd = openPin(sourceCheck);
    const other = progId(fd);
    try {
      replacePin(fd, fromPod);
    } finally {
      fs.closeSync(fd);
    }
    const b = load();
    expect(progId(b.programs.fromPod.fd)).toBe(other);
    expect(progId(b.programs.fromPod.fd)).not.toBe(oldProgram);
    b.close();
  });

  it("serves DEL's maps alone the same way: kept while their pins stay, opened afresh once one is re-made", () => {
    const a = openNodeMaps(bpffs.root);
    const b = openNodeMaps(bpffs.root);
    expect(b.counters.fd).toBe(a.counters.fd);
    a.close();
    b.close();
    const oldMap = mapId(a.counters.fd);
    const before = openDescriptors();
    fs.rmSync(mapPin(bpffs.root, MAP_NAMES.counters));
    load().close(); // the next ADD makes it again
    const c = openNodeMaps(bpffs.root);
    expect(mapId(c.counters.fd)).toBe(pinnedMapId(MAP_NAMES.counters));
    expect(mapId(c.counters.fd)).not.toBe(oldMap);
    c.close();
    // The old maps closed with nothing holding them: one set of each is open, as before.
    expect(openDescriptors()).toBe(before);
  }, 120_000);
});
