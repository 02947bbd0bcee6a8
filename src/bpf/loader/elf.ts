/**
 * Reads our compiled BPF objects (ELF64, little endian, EM_BPF) into specs: programs
 * (their instructions, map relocations and calls to kernel functions), map definitions
 * from the legacy "maps" section (struct nkc_map_def, see bpf/include/nkc_abi.h) and the
 * license. Pure: never touches the kernel. Supports exactly what our objects use (static
 * functions of .text that programs call, linked into each by subprograms.ts) and rejects
 * the rest (global data, global functions) with a message naming it, rather than loading
 * a program that would misbehave.
 */
import { struct, u32 } from "./struct";
import { type KfuncCallAt, linkSubprograms, type TextCall, type TextFunction } from "./subprograms";

/** A map's definition in the "maps" section, one symbol per map (bpf/include/nkc_abi.h). */
export const MAP_DEF = struct("nkc_map_def", {
  type: u32,
  keySize: u32,
  valueSize: u32,
  maxEntries: u32,
  mapFlags: u32,
});

export interface MapSpec {
  name: string;
  type: number;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  flags: number;
  /** A map of maps: what its inner maps look like (not expressible in nkc_map_def). */
  inner?: MapSpec;
}

export interface MapRelocation {
  /** Index of the ld_imm64 instruction (8-byte slots) inside the program. */
  insnIndex: number;
  mapName: string;
}

/** A call to a kernel function (an `extern ... __ksym` declaration in the C). */
export interface KfuncCall {
  /** Index of the call instruction inside the program. */
  insnIndex: number;
  name: string;
}

export interface ProgramSpec {
  name: string;
  section: string;
  /** Raw instructions, 8 bytes each, before relocation. */
  instructions: Buffer;
  relocations: MapRelocation[];
  kfuncCalls: KfuncCall[];
}

export interface ObjectSpec {
  license: string;
  maps: MapSpec[];
  programs: ProgramSpec[];
}

export class ElfError extends Error {
  override name = "ElfError";
}

const EM_BPF = 247;
const SHT_PROGBITS = 1;
const SHT_SYMTAB = 2;
const SHT_REL = 9;
const SHF_EXECINSTR = 0x4;
const STT_OBJECT = 1;
const STT_FUNC = 2;
const R_BPF_64_64 = 1;
const R_BPF_64_32 = 10;
const SHN_UNDEF = 0;
const BPF_CALL = 0x85; // BPF_JMP | BPF_CALL
const MAPS_SECTION = "maps";
const TEXT_SECTION = ".text";
const LICENSE_SECTION = "license";

export interface Section {
  index: number;
  name: string;
  type: number;
  flags: bigint;
  offset: number;
  size: number;
  link: number;
  info: number;
  data: Buffer;
}

export interface ElfSymbol {
  name: string;
  type: number;
  bind: number;
  sectionIndex: number;
  value: number;
  size: number;
}

export interface Relocation {
  offset: number;
  type: number;
  symbol: ElfSymbol;
}

/** The generic ELF view: sections, symbols and relocation tables by target section. */
export interface ElfFile {
  sections: Section[];
  symbols: ElfSymbol[];
  relocations: Map<number, Relocation[]>;
}

/** The section headers, with each section's name and bytes. */
function readSections(bytes: Buffer): Section[] {
  if (bytes.length < 64 || bytes.readUInt32BE(0) !== 0x7f454c46) throw new ElfError("not an ELF file");
  if (bytes[4] !== 2 || bytes[5] !== 1) throw new ElfError("not a 64-bit little-endian ELF file");
  if (bytes.readUInt16LE(18) !== EM_BPF) throw new ElfError(`not a BPF object (e_machine ${bytes.readUInt16LE(18)})`);
  const shoff = Number(bytes.readBigUInt64LE(0x28));
  const shentsize = bytes.readUInt16LE(0x3a);
  const shnum = bytes.readUInt16LE(0x3c);
  const shstrndx = bytes.readUInt16LE(0x3e);
  if (shoff + shnum * shentsize > bytes.length) throw new ElfError("section headers run past the end of the file");

  const raw = Array.from({ length: shnum }, (_, index) => {
    const h = shoff + index * shentsize;
    const type = bytes.readUInt32LE(h + 4);
    const offset = Number(bytes.readBigUInt64LE(h + 24));
    const size = Number(bytes.readBigUInt64LE(h + 32));
    // SHT_NOBITS (.bss) occupies no file bytes.
    const data = type === 8 ? Buffer.alloc(0) : bytes.subarray(offset, offset + size);
    if (type !== 8 && offset + size > bytes.length)
      throw new ElfError(`section ${index} runs past the end of the file`);
    return {
      index,
      nameOffset: bytes.readUInt32LE(h),
      type,
      flags: bytes.readBigUInt64LE(h + 8),
      offset,
      size,
      link: bytes.readUInt32LE(h + 40),
      info: bytes.readUInt32LE(h + 44),
      data,
    };
  });
  const shstr = raw[shstrndx]?.data;
  if (!shstr) throw new ElfError("missing section name table");
  return raw.map(({ nameOffset, ...s }) => ({ ...s, name: cString(shstr, nameOffset) }));
}

/** The bytes of the section named `name` (".BTF"), without reading symbols or relocations. */
export function sectionData(bytes: Buffer, name: string): Buffer | undefined {
  return readSections(bytes).find((s) => s.name === name)?.data;
}

export function readElf(bytes: Buffer): ElfFile {
  const sections = readSections(bytes);
  const symtab = sections.find((s) => s.type === SHT_SYMTAB);
  if (!symtab) throw new ElfError("missing symbol table");
  const strtab = sections[symtab.link]?.data ?? Buffer.alloc(0);
  const symbols: ElfSymbol[] = [];
  for (let o = 0; o + 24 <= symtab.data.length; o += 24) {
    const info = symtab.data.readUInt8(o + 4);
    symbols.push({
      name: cString(strtab, symtab.data.readUInt32LE(o)),
      type: info & 0xf,
      bind: info >> 4,
      sectionIndex: symtab.data.readUInt16LE(o + 6),
      value: Number(symtab.data.readBigUInt64LE(o + 8)),
      size: Number(symtab.data.readBigUInt64LE(o + 16)),
    });
  }

  const relocations = new Map<number, Relocation[]>();
  for (const rel of sections.filter((s) => s.type === SHT_REL)) {
    const list: Relocation[] = [];
    for (let o = 0; o + 16 <= rel.data.length; o += 16) {
      const info = rel.data.readBigUInt64LE(o + 8);
      const symbol = symbols[Number(info >> 32n)];
      if (!symbol) throw new ElfError(`relocation in ${rel.name} names a missing symbol`);
      list.push({ offset: Number(rel.data.readBigUInt64LE(o)), type: Number(info & 0xffffffffn), symbol });
    }
    relocations.set(rel.info, list);
  }
  return { sections, symbols, relocations };
}

/** Programs, maps and license of one of our objects. */
export function readObject(bytes: Buffer): ObjectSpec {
  const elf = readElf(bytes);
  const byName = (name: string) => elf.sections.find((s) => s.name === name);

  const licenseSection = byName(LICENSE_SECTION);
  if (!licenseSection) throw new ElfError('missing "license" section');
  const license = cString(licenseSection.data, 0);

  const mapsSection = byName(MAPS_SECTION);
  const maps: MapSpec[] = mapsSection
    ? elf.symbols
        .filter((s) => s.sectionIndex === mapsSection.index && s.type === STT_OBJECT)
        .map((s) => readMapDef(s, mapsSection.data))
    : [];

  const executable = (s: Section) => s.type === SHT_PROGBITS && (s.flags & BigInt(SHF_EXECINSTR)) !== 0n;
  // .text holds the static functions programs call (bpf-to-bpf calls); it is no program.
  const text = elf.sections.find((s) => s.name === TEXT_SECTION && executable(s) && s.size > 0);
  const textFunctions: TextFunction[] = text
    ? elf.symbols
        .filter((s) => s.sectionIndex === text.index && s.type === STT_FUNC)
        .map((s) => ({ name: s.name, start: s.value / 8, length: s.size / 8 }))
    : [];
  const textRelocations = text ? textItems(elf.relocations.get(text.index) ?? [], text, mapsSection) : [];

  const programs: ProgramSpec[] = [];
  for (const section of elf.sections) {
    if (!executable(section) || section.size === 0 || section === text) continue;
    const functions = elf.symbols.filter((s) => s.sectionIndex === section.index && s.type === STT_FUNC);
    const relocs = elf.relocations.get(section.index) ?? [];
    for (const fn of functions) {
      const end = fn.value + fn.size;
      const instructions = Buffer.from(section.data.subarray(fn.value, end));
      const own = relocs.filter((r) => r.offset >= fn.value && r.offset < end);
      const intoText = (r: Relocation) => text !== undefined && r.symbol.sectionIndex === text.index;
      const textCalls: TextCall[] = own.filter(intoText).map((r) => {
        const insnIndex = (r.offset - fn.value) / 8;
        if (r.type !== R_BPF_64_32) throw new ElfError(`${fn.name}: relocation type ${r.type} into .text`);
        return { insnIndex, target: r.symbol.value / 8 + instructions.readInt32LE(insnIndex * 8 + 4) + 1 };
      });
      const linked = linkSubprograms(
        fn.name,
        instructions,
        textCalls,
        text?.data ?? Buffer.alloc(0),
        textFunctions,
        textRelocations,
      );
      programs.push({
        name: fn.name,
        section: section.name,
        instructions: linked.instructions,
        relocations: [
          ...own
            .filter((r) => r.symbol.sectionIndex !== SHN_UNDEF && !intoText(r))
            .map((r) => mapRelocation(r, fn, section, mapsSection)),
          ...linked.relocations.flatMap((r) =>
            r.kind === "map" ? [{ insnIndex: r.insnIndex, mapName: r.mapName }] : [],
          ),
        ],
        kfuncCalls: [
          ...own.filter((r) => r.symbol.sectionIndex === SHN_UNDEF).map((r) => kfuncCall(r, fn, section, instructions)),
          ...linked.relocations.flatMap((r) => (r.kind === "kfunc" ? [{ insnIndex: r.insnIndex, name: r.name }] : [])),
        ],
      });
    }
  }
  return { license, maps, programs };
}

type TextItem = { kind: "map"; mapName: string } | KfuncCallAt;

/** What the functions of .text refer to (maps, kernel functions), by their instruction in .text. */
function textItems(relocs: Relocation[], text: Section, maps: Section | undefined) {
  const start: ElfSymbol = {
    name: TEXT_SECTION,
    type: STT_FUNC,
    bind: 0,
    sectionIndex: text.index,
    value: 0,
    size: text.size,
  };
  return relocs.map((r) => {
    const textIndex = r.offset / 8;
    const item: TextItem =
      r.symbol.sectionIndex === SHN_UNDEF
        ? { kind: "kfunc", name: kfuncCall(r, start, text, text.data).name }
        : { kind: "map", mapName: mapRelocation(r, start, text, maps).mapName };
    return { textIndex, item };
  });
}

function readMapDef(symbol: ElfSymbol, data: Buffer): MapSpec {
  if (symbol.size !== MAP_DEF.size || symbol.value + MAP_DEF.size > data.length) {
    throw new ElfError(`map ${symbol.name}: definition is ${symbol.size} bytes, expected ${MAP_DEF.size}`);
  }
  const { type, keySize, valueSize, maxEntries, mapFlags } = MAP_DEF.decode(data, symbol.value);
  return { name: symbol.name, type, keySize, valueSize, maxEntries, flags: mapFlags };
}

function mapRelocation(r: Relocation, fn: ElfSymbol, section: Section, maps: Section | undefined): MapRelocation {
  const where = `${fn.name} (${section.name}+${r.offset})`;
  if (r.type !== R_BPF_64_64) throw new ElfError(`${where}: unsupported relocation type ${r.type}`);
  if (!maps || r.symbol.sectionIndex !== maps.index) {
    // .data/.rodata/.bss would be global variables: our programs have none
    // (configuration lives in maps).
    throw new ElfError(`${where}: relocation against "${r.symbol.name || "section"}" outside the maps section`);
  }
  return { insnIndex: (r.offset - fn.value) / 8, mapName: r.symbol.name };
}

/** clang emits a call to an extern function as `call -1` with R_BPF_64_32 against it. */
function kfuncCall(r: Relocation, fn: ElfSymbol, section: Section, instructions: Buffer): KfuncCall {
  const where = `${fn.name} (${section.name}+${r.offset})`;
  const insnIndex = (r.offset - fn.value) / 8;
  if (r.type !== R_BPF_64_32 || instructions[insnIndex * 8] !== BPF_CALL) {
    throw new ElfError(`${where}: relocation against undefined "${r.symbol.name}" is not a call`);
  }
  return { insnIndex, name: r.symbol.name };
}

function cString(buf: Buffer, offset: number): string {
  const end = buf.indexOf(0, offset);
  return buf.toString("utf8", offset, end === -1 ? buf.length : end);
}
