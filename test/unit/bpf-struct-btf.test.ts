/**
 * The check of user space's struct tables against an object's BTF
 * (src/bpf/loader/struct-btf.ts), on BTF written here as clang writes it: a struct laid
 * out as its table says passes; a field moved in C (the sizes unchanged, which the
 * headers' _Static_asserts cannot see) fails, naming the struct, the field and both
 * offsets; so do a field missing, one C has that the table lacks, another size, another
 * shape, another total and a struct not there at all. And every table's size is the one
 * its header's _Static_assert pins. test/bpf/struct-btf.test.ts holds the real objects
 * against the tables, and a header edited and compiled.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { BANDWIDTH } from "../../src/bpf/bandwidth/abi";
import { ENDPOINT, FLOW_KEY } from "../../src/bpf/fastpath/abi";
import { BTF_KIND, readBtf } from "../../src/bpf/loader/btf";
import type { CType, Field, StructLayout } from "../../src/bpf/loader/struct";
import { structMismatches } from "../../src/bpf/loader/struct-btf";
import { OBJECT_STRUCTS } from "../../src/bpf/structs";
import { SVC_CLIENT, SVC_PAIR } from "../../src/bpf/svc/abi";

/** A member as the BTF written here gives it: its C name, type id and byte offset. */
interface Member {
  name: string;
  type: number;
  offset: number;
}

/** Raw BTF, type by type, the way clang lays it out (linux/btf.h). */
class BtfWriter {
  private readonly types: Buffer[] = [];
  private strings = Buffer.from([0]);
  private readonly ints = new Map<number, number>();
  private readonly structs = new Map<string, number>();

  private name(text: string): number {
    if (text === "") return 0;
    const at = this.strings.length;
    this.strings = Buffer.concat([this.strings, Buffer.from(`${text}\0`)]);
    return at;
  }

  private add(name: string, kind: number, vlen: number, sizeOrType: number, extra: number[]): number {
    const b = Buffer.alloc(12 + extra.length * 4);
    b.writeUInt32LE(this.name(name), 0);
    b.writeUInt32LE(((kind << 24) | vlen) >>> 0, 4);
    b.writeUInt32LE(sizeOrType, 8);
    extra.forEach((v, i) => {
      b.writeUInt32LE(v >>> 0, 12 + i * 4);
    });
    this.types.push(b);
    return this.types.length;
  }

  int(size: number): number {
    const known = this.ints.get(size);
    if (known) return known;
    const id = this.add(`u${size * 8}`, BTF_KIND.INT, 0, size, [size * 8]);
    this.ints.set(size, id);
    return id;
  }

  /** A typedef over an int, as linux/types.h gives __u32 and friends. */
  typedef(name: string, type: number): number {
    return this.add(name, BTF_KIND.TYPEDEF, 0, type, []);
  }

  array(element: number, length: number): number {
    return this.add("", BTF_KIND.ARRAY, 0, 0, [element, this.int(4), length]);
  }

  struct(name: string, members: Member[], size: number): number {
    const extra = members.flatMap((m) => [this.name(m.name), m.type, m.offset * 8]);
    const id = this.add(name, BTF_KIND.STRUCT, members.length, size, extra);
    this.structs.set(name, id);
    return id;
  }

  /** The type user space's `type` stands for, written as C would declare it. */
  typeOf(type: CType<unknown>): number {
    const nested = type as CType<unknown> & Partial<StructLayout>;
    if (nested.fields && nested.name) return this.structs.get(nested.name) ?? this.table(nested as StructLayout);
    if (type.element && type.length !== undefined) return this.array(this.typeOf(type.element), type.length);
    return this.typedef(type.c, this.int(type.size));
  }

  /** `table` as C lays it out, after `edit` changes its members. */
  table(table: StructLayout, edit: (members: Member[]) => Member[] = (m) => m, size = table.size): number {
    const members = table.fields.map((f: Field) => ({ name: f.cName, type: this.typeOf(f.type), offset: f.offset }));
    return this.struct(table.name, edit(members), size);
  }

  blob(): Buffer {
    const types = Buffer.concat(this.types);
    const header = Buffer.alloc(24);
    header.writeUInt16LE(0xeb9f, 0);
    header.writeUInt8(1, 2);
    header.writeUInt32LE(24, 4);
    header.writeUInt32LE(0, 8);
    header.writeUInt32LE(types.length, 12);
    header.writeUInt32LE(types.length, 16);
    header.writeUInt32LE(this.strings.length, 20);
    return Buffer.concat([header, types, this.strings]);
  }
}

/** The problems the check finds in BTF holding `table` as `edit` leaves it. */
function check(table: StructLayout, edit?: (members: Member[]) => Member[], size?: number): string[] {
  const w = new BtfWriter();
  w.table(table, edit, size);
  return structMismatches(readBtf(w.blob()), table, "test.o");
}

const swap = (a: string, b: string) => (members: Member[]) =>
  members.map((m) => {
    const other = members.find((o) => o.name === (m.name === a ? b : m.name === b ? a : ""));
    return other ? { ...m, offset: other.offset } : m;
  });

describe("holding a struct's table against an object's BTF", () => {
  it("passes a struct laid out as its table says, nested structs and arrays included", () => {
    for (const table of [ENDPOINT, FLOW_KEY, BANDWIDTH, SVC_PAIR, SVC_CLIENT]) expect(check(table)).toEqual([]);
  });

  it("fails a field moved in C, naming the struct, the field and both offsets", () => {
    expect(check(ENDPOINT, swap("host_ifindex", "flags"))).toEqual([
      "struct nkc_endpoint.host_ifindex is at offset 4 in test.o, at 0 in user space's table",
      "struct nkc_endpoint.flags is at offset 0 in test.o, at 4 in user space's table",
    ]);
    expect(check(FLOW_KEY, swap("port_a", "port_b"))).toEqual([
      "struct nkc_flow_key.port_a is at offset 34 in test.o, at 32 in user space's table",
      "struct nkc_flow_key.port_b is at offset 32 in test.o, at 34 in user space's table",
    ]);
  });

  it("fails a field C does not have, and one C has that the table lacks", () => {
    const renamed = (members: Member[]) => members.map((m) => (m.name === "flags" ? { ...m, name: "mode" } : m));
    expect(check(ENDPOINT, renamed)).toEqual([
      "struct nkc_endpoint.flags (offset 4 in user space's table) is not in test.o",
      "struct nkc_endpoint.mode (offset 4 in test.o) is not in user space's table",
    ]);
  });

  it("fails a field of another size or shape, and another total size", () => {
    const w = new BtfWriter();
    const u16 = w.typedef("__u16", w.int(2));
    const bytes = w.array(w.typedef("__u8", w.int(1)), 4);
    w.struct(
      "nkc_endpoint",
      [
        { name: "host_ifindex", type: u16, offset: 0 },
        { name: "flags", type: bytes, offset: 4 },
      ],
      12,
    );
    expect(structMismatches(readBtf(w.blob()), ENDPOINT, "test.o")).toEqual([
      "struct nkc_endpoint.host_ifindex is 2 bytes in test.o, 4 (__u32) in user space's table",
      "struct nkc_endpoint.flags is __u8[4] in test.o, __u32 in user space's table",
      "struct nkc_endpoint is 12 bytes in test.o, 8 in user space's table",
    ]);
  });

  it("fails a struct the object does not have", () => {
    const w = new BtfWriter();
    w.table(FLOW_KEY);
    expect(structMismatches(readBtf(w.blob()), ENDPOINT, "test.o")).toEqual([
      "struct nkc_endpoint is not in test.o's BTF",
    ]);
  });
});

describe("the tables and the headers", () => {
  const include = path.resolve(__dirname, "../../bpf/include");
  const headers = fs.readdirSync(include).map((file) => fs.readFileSync(path.join(include, file), "utf8"));
  // A size is a number, or sums and products of the headers' own constants.
  const defines = new Map(
    headers.flatMap((text) => [...text.matchAll(/^#define (NKC_\w+)\s+([^/\n]+)/gm)].map((m) => [m[1], m[2]?.trim()])),
  );
  const evaluate = (expr: string): number => {
    let text = expr;
    for (let depth = 0; depth < 5; depth++) text = text.replace(/NKC_\w+/g, (name) => `(${defines.get(name)})`);
    if (!/^[\d\s+*()]+$/.test(text)) throw new Error(`cannot evaluate ${expr}`);
    return Function(`return ${text};`)() as number;
  };
  const asserted = new Map(
    headers.flatMap((text) =>
      [...text.matchAll(/_Static_assert\(sizeof\(struct (\w+)\) == ([^,]+),/g)].map(
        (m) => [m[1] as string, evaluate(m[2] as string)] as const,
      ),
    ),
  );
  const tables = new Map(Object.values(OBJECT_STRUCTS).flatMap((list) => list.map((t) => [t.name, t] as const)));

  it("has each table's size pinned by its header's _Static_assert", () => {
    expect(tables.size).toBeGreaterThan(30);
    for (const table of tables.values())
      expect([table.name, asserted.get(table.name)]).toEqual([table.name, table.size]);
  });
});
