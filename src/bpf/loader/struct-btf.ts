/**
 * Holds user space's struct tables (struct.ts) against the BTF clang writes into an
 * object (its .BTF section: clang -g, and bpf/lib/common.h's NKC_BTF_TYPE puts every
 * map's key and value type there). Each table's struct is found by its C name, and every
 * field's offset, size and shape, every member C has that the table lacks, and the
 * total size are compared. A difference is an error naming the object, the struct, the
 * field and both offsets: a layout changed on one side only fails the build
 * (scripts/build.mjs, through ../structs.ts) and the load (every loader checks the
 * objects it reads), and never reaches a map. Pure.
 */
import { BTF_KIND, type Btf, readBtf } from "./btf";
import { sectionData } from "./elf";
import type { CType, StructLayout } from "./struct";

export class StructLayoutError extends Error {
  override name = "StructLayoutError";
}

/** How the object and user space's table differ on `table`, each said whole (none when they agree). */
export function structMismatches(btf: Btf, table: StructLayout, object: string): string[] {
  const ids = btf.structsNamed(table.name);
  if (ids.length === 0) return [`struct ${table.name} is not in ${object}'s BTF`];
  return ids.flatMap((id) => compare(btf, id, table, object));
}

function compare(btf: Btf, id: number, table: StructLayout, object: string): string[] {
  const type = btf.type(id);
  const members = type?.members ?? [];
  const problems: string[] = [];
  const ours = `user space's table`;
  for (const field of table.fields) {
    const where = `struct ${table.name}.${field.cName}`;
    const member = members.find((m) => m.name === field.cName);
    if (!member) {
      problems.push(`${where} (offset ${field.offset} in ${ours}) is not in ${object}`);
      continue;
    }
    if (member.bitfieldSize !== 0 || member.bitOffset % 8 !== 0) {
      problems.push(`${where} is a bitfield in ${object}`);
      continue;
    }
    const offset = member.bitOffset / 8;
    if (offset !== field.offset) {
      problems.push(`${where} is at offset ${offset} in ${object}, at ${field.offset} in ${ours}`);
    }
    const size = btf.sizeOf(member.type);
    if (size !== field.type.size) {
      problems.push(`${where} is ${size} bytes in ${object}, ${field.type.size} (${field.type.c}) in ${ours}`);
    } else {
      const shape = shapeMismatch(btf, member.type, field.type);
      if (shape) problems.push(`${where} is ${shape} in ${object}, ${field.type.c} in ${ours}`);
    }
  }
  for (const member of members) {
    if (!table.fields.some((f) => f.cName === member.name)) {
      problems.push(
        `struct ${table.name}.${member.name} (offset ${member.bitOffset / 8} in ${object}) is not in ${ours}`,
      );
    }
  }
  const size = type?.sizeOrType ?? 0;
  if (size !== table.size)
    problems.push(`struct ${table.name} is ${size} bytes in ${object}, ${table.size} in ${ours}`);
  return problems;
}

/** What the object's type is, where it is not what the table's is (sizes already agree). */
function shapeMismatch(btf: Btf, id: number, ours: CType<unknown>): string | undefined {
  const type = btf.type(btf.resolve(id));
  if (!type) return "void";
  if (ours.fields) {
    const named = ours.c; // "struct <name>"
    return type.kind === BTF_KIND.STRUCT && `struct ${type.name}` === named ? undefined : describe(btf, id);
  }
  if (ours.element && ours.length !== undefined) {
    if (type.kind !== BTF_KIND.ARRAY || !type.array || type.array.length !== ours.length) return describe(btf, id);
    return shapeMismatch(btf, type.array.type, ours.element) ? describe(btf, id) : undefined;
  }
  return type.kind === BTF_KIND.INT || type.kind === BTF_KIND.ENUM ? undefined : describe(btf, id);
}

/** A type as C would spell it, near enough for a message (a typedef by its name). */
function describe(btf: Btf, id: number): string {
  const type = btf.type(id);
  if (!type) return "void";
  if (type.kind === BTF_KIND.TYPEDEF) return type.name;
  if (btf.resolve(id) !== id) return describe(btf, type.sizeOrType); // const, volatile, ...
  if (type.kind === BTF_KIND.ARRAY && type.array) return `${describe(btf, type.array.type)}[${type.array.length}]`;
  if (type.kind === BTF_KIND.STRUCT) return `struct ${type.name}`;
  if (type.kind === BTF_KIND.UNION) return `union ${type.name}`;
  if (type.kind === BTF_KIND.PTR) return "a pointer";
  return type.name || `a type of kind ${type.kind}`;
}

/** The object's BTF (its .BTF section). */
export function objectBtf(object: Buffer, name: string): Btf {
  const btf = sectionData(object, ".BTF");
  if (!btf) throw new StructLayoutError(`${name} has no BTF (.BTF): it was built without clang -g`);
  return readBtf(btf);
}

/** Every difference between `tables` and the object's own layouts, said whole. */
export function objectStructMismatches(object: Buffer, tables: readonly StructLayout[], name: string): string[] {
  const btf = objectBtf(object, name);
  return tables.flatMap((table) => structMismatches(btf, table, name));
}

/**
 * Throws, naming every difference, unless the object lays out each of `tables` as user
 * space does. Loaders call it on each object they read, before any map is made.
 */
export function checkStructs(object: Buffer, tables: readonly StructLayout[], name: string): void {
  const problems = objectStructMismatches(object, tables, name);
  if (problems.length > 0) {
    throw new StructLayoutError(
      `${name} and user space disagree on a struct's layout (bpf/include/*.h against src/bpf/*/abi.ts):\n  ${problems.join("\n  ")}`,
    );
  }
}
