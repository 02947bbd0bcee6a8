/**
 * Reading BTF, the kernel's type format (linux/btf.h), which clang -g also writes into
 * our objects' .BTF section: a header, then the types (ids from 1, in order), then their
 * names. Two readers: function ids by name (findFunctions, for kfunc calls: kfuncs.ts),
 * and an object's types with struct members, array lengths and sizes (readBtf, which
 * struct-btf.ts holds user space's struct tables against). Pure: no CO-RE, no kernel
 * calls.
 */

const BTF_MAGIC = 0xeb9f;
const HEADER_LEN = 24;

/** BTF_KIND_* of linux/btf.h. */
export const BTF_KIND = {
  INT: 1,
  PTR: 2,
  ARRAY: 3,
  STRUCT: 4,
  UNION: 5,
  ENUM: 6,
  FWD: 7,
  TYPEDEF: 8,
  VOLATILE: 9,
  CONST: 10,
  RESTRICT: 11,
  FUNC: 12,
  FUNC_PROTO: 13,
  VAR: 14,
  DATASEC: 15,
  FLOAT: 16,
  DECL_TAG: 17,
  TYPE_TAG: 18,
  ENUM64: 19,
} as const;

/** Bytes that follow the 12-byte common header of each kind (linux/btf.h). */
function extraBytes(kind: number, vlen: number): number {
  switch (kind) {
    case BTF_KIND.INT:
    case BTF_KIND.VAR:
    case BTF_KIND.DECL_TAG:
      return 4;
    case BTF_KIND.ARRAY:
      return 12;
    case BTF_KIND.STRUCT:
    case BTF_KIND.UNION:
    case BTF_KIND.DATASEC:
    case BTF_KIND.ENUM64:
      return vlen * 12;
    case BTF_KIND.ENUM:
    case BTF_KIND.FUNC_PROTO:
      return vlen * 8;
    case BTF_KIND.PTR:
    case BTF_KIND.FWD:
    case BTF_KIND.TYPEDEF:
    case BTF_KIND.VOLATILE:
    case BTF_KIND.CONST:
    case BTF_KIND.RESTRICT:
    case BTF_KIND.FUNC:
    case BTF_KIND.FLOAT:
    case BTF_KIND.TYPE_TAG:
      return 0;
    default:
      throw new Error(`BTF: unknown type kind ${kind}`);
  }
}

interface Sections {
  typeOff: number;
  typeEnd: number;
  strOff: number;
  strLen: number;
}

function sections(btf: Buffer): Sections {
  if (btf.length < HEADER_LEN || btf.readUInt16LE(0) !== BTF_MAGIC) throw new Error("BTF: bad magic");
  const hdrLen = btf.readUInt32LE(4);
  const typeOff = hdrLen + btf.readUInt32LE(8);
  const typeLen = btf.readUInt32LE(12);
  const strOff = hdrLen + btf.readUInt32LE(16);
  const strLen = btf.readUInt32LE(20);
  if (typeOff + typeLen > btf.length || strOff + strLen > btf.length) throw new Error("BTF: sections past the end");
  return { typeOff, typeEnd: typeOff + typeLen, strOff, strLen };
}

/** Each type's common header, by id - 1: where it starts, its name's offset, kind, vlen,
 * kind_flag, and its size or type (size for INT, ENUM, STRUCT, UNION, DATASEC, FLOAT; a
 * type id for the rest). Numbers only: names are read when asked for. */
interface TypeTable {
  count: number;
  pos: Uint32Array;
  nameOff: Uint32Array;
  info: Uint32Array;
  sizeOrType: Uint32Array;
}

function typeTable(btf: Buffer, s: Sections): TypeTable {
  const at: number[] = [];
  for (let pos = s.typeOff; pos < s.typeEnd; ) {
    const info = btf.readUInt32LE(pos + 4);
    at.push(pos);
    pos += 12 + extraBytes((info >>> 24) & 0x1f, info & 0xffff);
    if (pos > s.typeEnd) throw new Error("BTF: a type runs past the type section");
  }
  const table: TypeTable = {
    count: at.length,
    pos: Uint32Array.from(at),
    nameOff: new Uint32Array(at.length),
    info: new Uint32Array(at.length),
    sizeOrType: new Uint32Array(at.length),
  };
  at.forEach((pos, i) => {
    table.nameOff[i] = btf.readUInt32LE(pos);
    table.info[i] = btf.readUInt32LE(pos + 4);
    table.sizeOrType[i] = btf.readUInt32LE(pos + 8);
  });
  return table;
}

const kindOf = (info: number) => (info >>> 24) & 0x1f;

/** The offsets, in the string section, of `name` (each place it stands whole). */
function nameOffsets(btf: Buffer, s: Sections, name: string, first = 0): number[] {
  const offsets: number[] = [];
  const end = s.strOff + s.strLen;
  // The section starts with the empty name: a name is preceded by a NUL.
  const needle = Buffer.from(`\0${name}\0`);
  for (let at = btf.indexOf(needle, s.strOff); at !== -1 && at < end; at = btf.indexOf(needle, at + 1)) {
    offsets.push(first + at + 1 - s.strOff);
  }
  return offsets;
}

/** What a split BTF continues: the base's type count and string section length. */
export interface BtfBase {
  typeCount: number;
  stringsLength: number;
}

export interface BtfFunctions {
  /** FUNC type ids by name, for the names asked for that are present. */
  ids: Map<string, number>;
  /** This BTF's own types and strings, for a split BTF built on it. */
  base: BtfBase;
}

/** Finds the FUNC types named `names` in raw BTF (`base` when it is split BTF). */
export function findFunctions(btf: Buffer, names: ReadonlySet<string>, base?: BtfBase): BtfFunctions {
  const s = sections(btf);
  // Only a name we look for can match: find its offset(s) once, then compare numbers.
  const wanted = new Map<number, string>();
  const firstOffset = base?.stringsLength ?? 0;
  for (const name of names) for (const off of nameOffsets(btf, s, name, firstOffset)) wanted.set(off, name);
  const ids = new Map<string, number>();
  const types = typeTable(btf, s);
  const firstId = (base?.typeCount ?? 0) + 1;
  for (let i = 0; i < types.count; i++) {
    if (kindOf(types.info[i] ?? 0) !== BTF_KIND.FUNC) continue;
    const name = wanted.get(types.nameOff[i] ?? 0);
    if (name !== undefined && !ids.has(name)) ids.set(name, firstId + i);
  }
  return { ids, base: { typeCount: firstId - 1 + types.count, stringsLength: firstOffset + s.strLen } };
}

/** A struct's or union's member. */
export interface BtfMember {
  name: string;
  type: number;
  bitOffset: number;
  /** A bitfield's width; 0 for a whole field. */
  bitfieldSize: number;
}

export interface BtfType {
  kind: number;
  name: string;
  /** Size for INT, ENUM, STRUCT, UNION, DATASEC, FLOAT; a type id for the rest. */
  sizeOrType: number;
  members?: BtfMember[];
  array?: { type: number; length: number };
}

/** The types of one (unsplit) BTF, as an object's .BTF section holds them. */
export interface Btf {
  /** The type with id `id` (0 is void: undefined). */
  type(id: number): BtfType | undefined;
  /** The ids of the STRUCT types named `name`. */
  structsNamed(name: string): number[];
  /** `id` past typedefs and qualifiers (const, volatile, restrict, type tags). */
  resolve(id: number): number;
  /** The size in bytes of a value of type `id`. */
  sizeOf(id: number): number;
}

export function readBtf(btf: Buffer): Btf {
  const s = sections(btf);
  const table = typeTable(btf, s);
  const name = (off: number) => {
    const at = s.strOff + off;
    const end = btf.indexOf(0, at);
    return btf.toString("utf8", at, end === -1 || end > s.strOff + s.strLen ? s.strOff + s.strLen : end);
  };
  const cache = new Map<number, BtfType>();
  const get = (id: number): BtfType | undefined => {
    if (id < 1 || id > table.count) return undefined;
    const known = cache.get(id);
    if (known) return known;
    const i = id - 1;
    const pos = table.pos[i] ?? 0;
    const info = table.info[i] ?? 0;
    const kind = kindOf(info);
    const type: BtfType = { kind, name: name(table.nameOff[i] ?? 0), sizeOrType: table.sizeOrType[i] ?? 0 };
    if (kind === BTF_KIND.STRUCT || kind === BTF_KIND.UNION) {
      const kindFlag = info >>> 31 === 1;
      type.members = Array.from({ length: info & 0xffff }, (_, m) => {
        const at = pos + 12 + m * 12;
        const offset = btf.readUInt32LE(at + 8);
        return {
          name: name(btf.readUInt32LE(at)),
          type: btf.readUInt32LE(at + 4),
          // With kind_flag set, the high 8 bits are a bitfield's width.
          bitOffset: kindFlag ? offset & 0xffffff : offset,
          bitfieldSize: kindFlag ? offset >>> 24 : 0,
        };
      });
    } else if (kind === BTF_KIND.ARRAY) {
      type.array = { type: btf.readUInt32LE(pos + 12), length: btf.readUInt32LE(pos + 20) };
    }
    cache.set(id, type);
    return type;
  };
  const QUALIFIERS: readonly number[] = [
    BTF_KIND.TYPEDEF,
    BTF_KIND.VOLATILE,
    BTF_KIND.CONST,
    BTF_KIND.RESTRICT,
    BTF_KIND.TYPE_TAG,
  ];
  const resolve = (id: number): number => {
    let at = id;
    for (let hops = 0; hops < 32; hops++) {
      const t = get(at);
      if (!t || !QUALIFIERS.includes(t.kind)) return at;
      at = t.sizeOrType;
    }
    throw new Error(`BTF: type ${id} is a chain of typedefs and qualifiers too long to follow`);
  };
  const sizeOf = (id: number): number => {
    const t = get(resolve(id));
    if (!t) throw new Error(`BTF: type ${id} has no size (void or missing)`);
    switch (t.kind) {
      case BTF_KIND.PTR:
        return 8; // BPF is a 64-bit target
      case BTF_KIND.ARRAY:
        return t.array ? t.array.length * sizeOf(t.array.type) : 0;
      case BTF_KIND.INT:
      case BTF_KIND.ENUM:
      case BTF_KIND.ENUM64:
      case BTF_KIND.STRUCT:
      case BTF_KIND.UNION:
      case BTF_KIND.FLOAT:
      case BTF_KIND.DATASEC:
        return t.sizeOrType;
      default:
        throw new Error(`BTF: type ${id} (kind ${t.kind}) has no size`);
    }
  };
  const structsNamed = (wanted: string): number[] => {
    const offsets = new Set(nameOffsets(btf, s, wanted));
    const ids: number[] = [];
    for (let i = 0; i < table.count; i++) {
      if (kindOf(table.info[i] ?? 0) === BTF_KIND.STRUCT && offsets.has(table.nameOff[i] ?? 0)) ids.push(i + 1);
    }
    return ids;
  };
  return { type: get, structsNamed, resolve, sizeOf };
}
