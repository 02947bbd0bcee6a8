/**
 * The Service tables' writer (src/bpf/svc/table.ts) against maps that record every single
 * write and, after each, read the tables as the programs do: every slot under a Service's
 * count names a backend of that Service. A write order that breaks this for one moment
 * fails here, as does a final state other than the one asked for.
 */
import { describe, expect, it } from "vitest";
import { decodeBackendValue, decodeSlotKey, decodeSvcValue, idBytes, slotKey, svcKey } from "../../src/bpf/svc/abi";
import { placeInSlots, type ServiceEntry, ServiceTable, type SvcTables, type TableMap } from "../../src/bpf/svc/table";

class FakeMap implements TableMap {
  readonly entries = new Map<string, Buffer>();
  constructor(private readonly afterWrite: () => void) {}
  lookup(key: Buffer) {
    return this.entries.get(key.toString("hex"));
  }
  update(key: Buffer, value: Buffer) {
    this.entries.set(key.toString("hex"), Buffer.from(value));
    this.afterWrite();
  }
  delete(key: Buffer) {
    const had = this.entries.delete(key.toString("hex"));
    this.afterWrite();
    return had;
  }
  *keys() {
    for (const k of [...this.entries.keys()]) yield Buffer.from(k, "hex");
  }
}

/** Tables whose every write is checked; `writes` counts them. */
function checkedTables(): SvcTables & { writes: number; violations: string[] } {
  const t = { writes: 0, violations: [] as string[] } as SvcTables & { writes: number; violations: string[] };
  const check = () => {
    t.writes += 1;
    for (const [k, v] of (t.services as FakeMap).entries) {
      const svc = decodeSvcValue(v);
      for (let slot = 0; slot < svc.backends; slot++) {
        const id = t.slots.lookup(slotKey(svc.id, slot));
        const backend = id && t.backends.lookup(id);
        if (!backend || decodeBackendValue(backend).svcId !== svc.id) {
          t.violations.push(`after write ${t.writes}: service ${k} slot ${slot} reads no backend of its own`);
        }
      }
    }
  };
  t.services = new FakeMap(check);
  t.slots = new FakeMap(check);
  t.backends = new FakeMap(check);
  return t;
}

/** What the tables hold, read from the maps alone (not from the writer's own view). */
function readBack(t: SvcTables): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const key of t.services.keys()) {
    const svc = decodeSvcValue(t.services.lookup(key) as Buffer);
    const backends: string[] = [];
    for (let slot = 0; slot < svc.backends; slot++) {
      const b = decodeBackendValue(t.backends.lookup(t.slots.lookup(slotKey(svc.id, slot)) as Buffer) as Buffer);
      backends.push(`${b.ip}:${b.port}`);
    }
    out.set(key.toString("hex"), backends.sort());
  }
  return out;
}

const F = { ip: "10.96.0.10", port: 80, protocol: "TCP" } as const;
const be = (n: number) => ({ ip: `10.244.0.${n}`, port: 8080 });

describe("ServiceTable", () => {
  it("keeps every read consistent through a random run of changes, and ends where asked", () => {
    let seed = 7;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const t = checkedTables();
    const table = new ServiceTable(t);
    const want = new Map<string, ServiceEntry>();
    for (let step = 0; step < 400; step++) {
      const frontend = { ip: `10.96.0.${1 + rand(5)}`, port: 80, protocol: rand(2) ? "TCP" : "UDP" } as const;
      if (rand(8) === 0) {
        table.remove(frontend);
        want.delete(svcKey(frontend).toString("hex"));
        continue;
      }
      const backends = Array.from({ length: rand(7) }, () => be(1 + rand(10)));
      const entry = { frontend, backends, ...(rand(3) === 0 ? { affinitySeconds: 30 } : {}) };
      table.write(entry);
      want.set(svcKey(frontend).toString("hex"), entry);
    }
    expect(t.violations).toEqual([]);
    const expected = new Map(
      [...want].map(([k, e]) => [k, [...new Set(e.backends.map((b) => `${b.ip}:${b.port}`))].sort()]),
    );
    expect(readBack(t)).toEqual(expected);
    // Nothing left over: every slot is under its Service's count, every backend in a slot.
    const counts = new Map(
      [...t.services.keys()].map((k) => {
        const svc = decodeSvcValue(t.services.lookup(k) as Buffer);
        return [svc.id, svc.backends];
      }),
    );
    for (const k of t.slots.keys()) {
      const { svcId, slot } = decodeSlotKey(k);
      expect(slot).toBeLessThan(counts.get(svcId) ?? 0);
    }
    const slotted = new Set([...t.slots.keys()].map((k) => (t.slots.lookup(k) as Buffer).readUInt32LE(0)));
    expect([...t.backends.keys()].map((k) => k.readUInt32LE(0)).every((id) => slotted.has(id))).toBe(true);
  });

  it("a new writer reads the tables back and repairs what an interrupted one left", () => {
    const t = checkedTables();
    new ServiceTable(t).write({ frontend: F, backends: [be(1), be(2)], affinitySeconds: 10 });
    // An interrupted writer: a slot and a backend no Service reaches.
    t.backends.update(idBytes(999), Buffer.alloc(28));
    t.slots.update(slotKey(77, 0), idBytes(999));
    const again = new ServiceTable(t);
    expect(again.entries()).toEqual([{ frontend: F, backends: [be(1), be(2)], affinitySeconds: 10 }]);
    expect(t.backends.lookup(idBytes(999))).toBeUndefined();
    expect(t.slots.lookup(slotKey(77, 0))).toBeUndefined();
    // And goes on writing without reusing an id in use.
    again.write({ frontend: { ...F, port: 81 }, backends: [be(3)] });
    expect(readBack(t).size).toBe(2);
    expect(t.violations).toEqual([]);
  });

  it("rewrites only the withdrawn backends' slots", () => {
    const t = checkedTables();
    const table = new ServiceTable(t);
    table.write({ frontend: F, backends: [be(1), be(2), be(3), be(4)] });
    const before = t.writes;
    table.write({ frontend: F, backends: [be(1), be(5), be(3), be(4)] });
    // One backend written, one slot switched to it, the old backend deleted.
    expect(t.writes - before).toBe(3);
  });

  it("refuses a backend of the other family and a Service over 65535 backends", () => {
    const table = new ServiceTable(checkedTables());
    expect(() => table.write({ frontend: F, backends: [{ ip: "fd00::1", port: 1 }] })).toThrow(/family/);
    const many = Array.from({ length: 65536 }, (_, i) => ({
      ip: `10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`,
      port: 1,
    }));
    expect(() => table.write({ frontend: F, backends: many })).toThrow(/65535/);
  });
});

describe("placeInSlots", () => {
  it("keeps kept backends in place, fills holes with new ones, then from the end", () => {
    expect(placeInSlots([1, 2, 3, 4], new Set([1, 3, 4]), 1)).toEqual([1, -1, 3, 4]);
    expect(placeInSlots([1, 2, 3, 4], new Set([1, 3, 4]), 0)).toEqual([1, 4, 3]);
    expect(placeInSlots([1, 2, 3, 4], new Set([2]), 0)).toEqual([2]);
    expect(placeInSlots([1, 2], new Set([1, 2]), 2)).toEqual([1, 2, -1, -1]);
    expect(placeInSlots([], new Set(), 0)).toEqual([]);
  });
});
