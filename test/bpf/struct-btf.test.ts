/**
 * Our objects and user space's struct tables (src/bpf/structs.ts): every object of the
 * build lays out each struct it shares as the tables say (its BTF, from clang -g). And
 * with one field of nkc_abi.h moved (struct nkc_endpoint's two fields swapped: the size
 * is the same, so the header's _Static_assert passes) the build's check and the node's
 * load both fail, naming the struct, the field and both offsets, before any map is made.
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mapsDir } from "../../src/bpf/loader/layout";
import { StructLayoutError } from "../../src/bpf/loader/struct-btf";
import { loadNodePrograms } from "../../src/bpf/node";
import type { NodeObjects } from "../../src/bpf/objects";
import { builtObjectMismatches, OBJECT_STRUCTS } from "../../src/bpf/structs";
import { buildObjects, objectsDir, repoRoot } from "./helpers/bpf-objects";
import { TestBpffs } from "./helpers/bpffs";

let objects: NodeObjects;
let built: Map<string, Buffer>;
let work: string;

beforeAll(() => {
  objects = buildObjects();
  built = new Map(Object.keys(OBJECT_STRUCTS).map((file) => [file, fs.readFileSync(path.join(objectsDir, file))]));
  work = fs.mkdtempSync(path.join(os.tmpdir(), "nkb-struct-btf-"));
});

afterAll(() => {
  fs.rmSync(work, { recursive: true, force: true });
});

/** bpf_lxc.c compiled as scripts/build-bpf.sh compiles it, from a copy of bpf/ whose
 * nkc_abi.h `edit` changed. */
function compileLxcWith(edit: (header: string) => string): Buffer {
  const copy = path.join(work, "bpf");
  fs.cpSync(path.join(repoRoot, "bpf"), copy, { recursive: true });
  const header = path.join(copy, "include/nkc_abi.h");
  const before = fs.readFileSync(header, "utf8");
  const after = edit(before);
  expect(after).not.toBe(before);
  fs.writeFileSync(header, after);
  const multiarch = execFileSync("gcc", ["-print-multiarch"], { encoding: "utf8" }).trim();
  const out = path.join(work, "bpf_lxc.o");
  execFileSync("clang", [
    ...["-O2", "-g", "-target", "bpf", "-mcpu=v3", "-Wall", "-Werror"],
    ...["-I", path.join(copy, "include"), "-I", path.join(copy, "lib"), "-idirafter", `/usr/include/${multiarch}`],
    ...["-c", path.join(copy, "bpf_lxc.c"), "-o", out],
  ]);
  return fs.readFileSync(out);
}

describe("the objects' structs", () => {
  it("are laid out in every object as user space declares them", () => {
    expect(builtObjectMismatches(built)).toEqual([]);
  });

  it("fail the build's check and the node's load when a field moves in C alone", () => {
    const moved = compileLxcWith((h) =>
      h.replace(
        /(struct nkc_endpoint \{\n)(\t__u32 host_ifindex;[^\n]*\n)(\t__u32 flags;[^\n]*\n)/,
        (_, open, first, second) => `${open}${second}${first}`,
      ),
    );
    const expected = [
      "struct nkc_endpoint.host_ifindex is at offset 4 in bpf_lxc.o, at 0 in user space's table",
      "struct nkc_endpoint.flags is at offset 0 in bpf_lxc.o, at 4 in user space's table",
    ];
    // The build (scripts/build.mjs runs builtObjectMismatches on dist/bpf).
    expect(builtObjectMismatches(new Map([...built, ["bpf_lxc.o", moved]]))).toEqual(expected);

    // The load: refused before any map is made.
    const bpffs = TestBpffs.mount();
    try {
      const withMoved: NodeObjects = {
        ...objects,
        variants: { ...objects.variants, memory: { ...objects.variants.memory, lxc: moved } },
      };
      let thrown: unknown;
      try {
        loadNodePrograms(bpffs.root, withMoved, { clusterCidrs: ["10.0.0.0/8"] }).close();
      } catch (e) {
        thrown = e;
      }
      expect(thrown).toBeInstanceOf(StructLayoutError);
      for (const line of expected) expect((thrown as Error).message).toContain(line);
      expect(fs.existsSync(mapsDir(bpffs.root))).toBe(false);
    } finally {
      bpffs.release();
    }
  });
});
