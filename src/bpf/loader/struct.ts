/**
 * A C struct that user space shares with the programs, declared once as a table of its
 * fields in C's order: `struct("nkc_endpoint", { hostIfindex: u32, flags: u32 })`. Each
 * field's offset, the size and the alignment follow C's rules (a field at the next
 * multiple of its alignment, the size rounded up to the struct's), and encode, decode and
 * field offsets come from the table; a field is named in camelCase for its C name
 * (host_ifindex). struct-btf.ts holds every table against the BTF clang writes into our
 * objects, so a field moved in C and not here fails the build and the load, by name,
 * instead of corrupting a map. Pure.
 *
 * Integers are the host's order (little endian), be16 and be32 network order; u64 is a
 * bigint, the rest numbers; `bytes(n)` is a __u8[n] as a Buffer; `array(t, n)` a t[n]
 * as a list; a nested struct is its own table.
 */
import { AF_INET, ipString } from "../../cni/address";

/** A C type as a field holds it: how C spells it, its size and alignment, how it reads and writes. */
export interface CType<T> {
  /** For messages: "__u32", "__u8[16]", "struct nkc_bw_bucket". */
  readonly c: string;
  readonly size: number;
  readonly align: number;
  /** An array's element and length, a struct's layout (the BTF check compares them too). */
  readonly element?: CType<unknown>;
  readonly length?: number;
  readonly fields?: readonly Field[];
  read(buf: Buffer, at: number): T;
  /** Writes `value` at `at` of a zeroed buffer (what it leaves out stays zero). */
  write(buf: Buffer, at: number, value: T): void;
}

function int<T>(
  c: string,
  size: number,
  read: (b: Buffer, at: number) => T,
  write: (b: Buffer, v: T, at: number) => void,
): CType<T> {
  return {
    c,
    size,
    align: size,
    read,
    write: (b, at, v) => {
      write(b, v, at);
    },
  };
}

export const u8 = int(
  "__u8",
  1,
  (b, at) => b.readUInt8(at),
  (b, v: number, at) => b.writeUInt8(v, at),
);
export const u16 = int(
  "__u16",
  2,
  (b, at) => b.readUInt16LE(at),
  (b, v: number, at) => b.writeUInt16LE(v, at),
);
export const u32 = int(
  "__u32",
  4,
  (b, at) => b.readUInt32LE(at),
  (b, v: number, at) => b.writeUInt32LE(v, at),
);
export const u64 = int(
  "__u64",
  8,
  (b, at) => b.readBigUInt64LE(at),
  (b, v: bigint, at) => b.writeBigUInt64LE(v, at),
);
/** Network order: ports as the packet carries them. */
export const be16 = int(
  "__be16",
  2,
  (b, at) => b.readUInt16BE(at),
  (b, v: number, at) => b.writeUInt16BE(v, at),
);
export const be32 = int(
  "__be32",
  4,
  (b, at) => b.readUInt32BE(at),
  (b, v: number, at) => b.writeUInt32BE(v, at),
);

/** __u8[length]: bytes as they are (addresses in network order); a shorter value is zero-padded. */
export function bytes(length: number): CType<Buffer> {
  return {
    c: `__u8[${length}]`,
    size: length,
    align: 1,
    element: u8,
    length,
    read: (b, at) => Buffer.from(b.subarray(at, at + length)),
    write: (b, at, v) => {
      if (v.length > length) throw new RangeError(`${v.length} bytes do not fit a __u8[${length}]`);
      v.copy(b, at);
    },
  };
}

/** element[length], read as a list; a shorter list leaves the rest zero. */
export function array<T>(element: CType<T>, length: number): CType<T[]> {
  return {
    c: `${element.c}[${length}]`,
    size: element.size * length,
    align: element.align,
    element,
    length,
    read: (b, at) => Array.from({ length }, (_, i) => element.read(b, at + i * element.size)),
    write: (b, at, v) => {
      if (v.length > length) throw new RangeError(`${v.length} values do not fit a ${element.c}[${length}]`);
      v.forEach((x, i) => {
        element.write(b, at + i * element.size, x);
      });
    },
  };
}

type Fields = Record<string, CType<unknown>>;
type ValueOf<C> = C extends CType<infer T> ? T : never;
/** What a struct decodes to: each field by its name. */
export type StructValue<F extends Fields> = { -readonly [K in keyof F]: ValueOf<F[K]> };
type InitOf<C> = C extends Struct<infer G> ? StructInit<G> : ValueOf<C>;
/** What a struct encodes from: any of its fields (a nested struct's too), the rest zero. */
export type StructInit<F extends Fields> = { -readonly [K in keyof F]?: InitOf<F[K]> };

export interface Field {
  /** As TypeScript names it (camelCase). */
  name: string;
  /** As C names it (snake_case): what the BTF check looks for. */
  cName: string;
  type: CType<unknown>;
  offset: number;
}

/** What the BTF check reads of a struct: its C name, fields and size. */
export interface StructLayout {
  /** The C name, without `struct`. */
  readonly name: string;
  readonly fields: readonly Field[];
  readonly size: number;
}

export interface Struct<F extends Fields> extends CType<StructValue<F>>, StructLayout {
  readonly fields: readonly Field[];
  /** The fields given, the rest zero, as C's designated initialisers leave them. */
  encode(value: StructInit<F>): Buffer;
  decode(buf: Buffer, at?: number): StructValue<F>;
  offsetOf(field: keyof F & string): number;
}

/** snake_case from camelCase: hostIfindex → host_ifindex, addrA → addr_a. */
export const cName = (name: string): string => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

const roundUp = (n: number, to: number) => Math.ceil(n / to) * to;

/** Declares `struct name` by its fields, in C's order. */
export function struct<F extends Fields>(name: string, fields: F): Struct<F> {
  const list: Field[] = [];
  let end = 0;
  let align = 1;
  for (const [field, type] of Object.entries(fields)) {
    const offset = roundUp(end, type.align);
    list.push({ name: field, cName: cName(field), type, offset });
    end = offset + type.size;
    align = Math.max(align, type.align);
  }
  const size = roundUp(end, align);
  const read = (buf: Buffer, at: number) => {
    if (buf.length < at + size) throw new RangeError(`struct ${name} is ${size} bytes, ${buf.length - at} given`);
    return Object.fromEntries(list.map((f) => [f.name, f.type.read(buf, at + f.offset)])) as StructValue<F>;
  };
  // Takes a StructInit too: a nested struct's fields may be left out like the outer's.
  const write = (buf: Buffer, at: number, value: StructInit<F> | StructValue<F>) => {
    for (const f of list) {
      const v = (value as Record<string, unknown>)[f.name];
      if (v !== undefined) f.type.write(buf, at + f.offset, v);
    }
  };
  const byName = new Map(list.map((f) => [f.name, f.offset]));
  return {
    name,
    c: `struct ${name}`,
    size,
    align,
    fields: list,
    read,
    write,
    encode: (value) => {
      const buf = Buffer.alloc(size);
      write(buf, 0, value);
      return buf;
    },
    decode: (buf, at = 0) => read(buf, at),
    offsetOf: (field) => {
      const offset = byName.get(field);
      if (offset === undefined) throw new Error(`struct ${name} has no field ${field}`);
      return offset;
    },
  };
}

/** A scalar key or value (a u32 ifindex, a u64 cookie) as the map holds it. */
export function scalar<T>(type: CType<T>, value: T): Buffer {
  const buf = Buffer.alloc(type.size);
  type.write(buf, 0, value);
  return buf;
}

export const u32Key = (n: number): Buffer => scalar(u32, n);
export const u64Key = (n: bigint): Buffer => scalar(u64, n);

/** The text of an address as our structs hold it: __u8[16] beside its family, IPv4 in
 * the first 4 bytes (bytes(16) pads what ipBytes gives when encoding). */
export function addressText(family: number, addr: Buffer): string {
  return ipString(Buffer.from(addr.subarray(0, family === AF_INET ? 4 : 16)));
}
