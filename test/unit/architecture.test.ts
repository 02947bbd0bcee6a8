/**
 * ARCHITECTURE.md is the map a newcomer starts from: every file of src/ and bpf/ must be
 * on it. A file counts as named when its folder's entry in the map ("src/bpf/", "bpf/")
 * names it, or when the document names it by its path ("datapath/fastpath.ts",
 * "bpf/README.md").
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";

const repo = path.resolve(__dirname, "../..");
const doc = fs.readFileSync(path.join(repo, "ARCHITECTURE.md"), "utf8");

/** The map's entries: the code block under "## Map", each entry a line at column 0 and
 * the indented lines after it. */
function mapEntries(markdown: string): Map<string, string> {
  const block = /## Map\n+```\n([\s\S]*?)\n```/.exec(markdown)?.[1] ?? "";
  const entries = new Map<string, string>();
  let key = "";
  for (const line of block.split("\n")) {
    if (/^\S/.test(line)) key = line.split(/\s+/)[0] ?? "";
    entries.set(key, `${entries.get(key) ?? ""}${line}\n`);
  }
  return entries;
}

const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** `word` stands in `text` as a name of its own, not as part of a longer name or path. */
const mentions = (text: string, word: string) =>
  new RegExp(`(^|[^\\w./-])${literal(word)}(?![\\w-]|\\.\\w)`, "m").test(text);

function filesUnder(dir: string): string[] {
  return fs
    .readdirSync(path.join(repo, dir), { recursive: true, encoding: "utf8" })
    .map((file) => `${dir}/${file}`)
    .filter((file) => fs.statSync(path.join(repo, file)).isFile())
    .sort();
}

/** The map's entry a file belongs to: its top folder's, for src/ the folder below it. */
function entryOf(file: string): string {
  const parts = file.split("/");
  if (parts[0] === "src") return parts.length > 2 ? `src/${parts[1]}/` : file;
  return `${parts[0]}/`;
}

function named(file: string, entries: Map<string, string>): boolean {
  const key = entryOf(file);
  const entry = entries.get(key);
  // By name, or by its path below the entry's folder ("include/nkc_abi.h" under "bpf/").
  const names = [path.basename(file), path.relative(key, file)];
  if (entry !== undefined && (key === file || names.some((name) => mentions(entry, name)))) return true;
  return [file, file.replace(/^src\//, "")].some((qualified) => mentions(doc, qualified));
}

describe("ARCHITECTURE.md", () => {
  const entries = mapEntries(doc);

  it("has a map whose entries include src/'s folders and bpf/", () => {
    expect([...entries.keys()]).toEqual(expect.arrayContaining(["src/bpf/", "src/datapath/", "src/cli/", "bpf/"]));
  });

  it("names every file of src/ and bpf/", () => {
    const files = [...filesUnder("src"), ...filesUnder("bpf")];
    expect(files.length).toBeGreaterThan(100);
    expect(files.filter((file) => !named(file, entries))).toEqual([]);
  });

  it("counts a file as named only where its own folder's entry, or its path, names it", () => {
    const map = mapEntries("## Map\n\n```\nsrc/a/   one.ts, b/two.ts\nsrc/b/   x\n```\n");
    expect(named("src/a/one.ts", map)).toBe(true);
    expect(named("src/b/one.ts", map)).toBe(false);
    expect(named("src/a/two.ts", map)).toBe(false);
    expect(named("src/a/ne.ts", map)).toBe(false);
  });
});

/** The dependency levels of the Invariants: a folder imports only from levels below. */
const LEVELS: Record<string, number> = {
  agent: 0,
  cli: 1,
  commands: 2,
  install: 2,
  datapath: 3,
  ipam: 3,
  bpf: 4,
  netlink: 4,
  sys: 5,
  // Pure data and its filter, below everything: the agent and the CLI both read them.
  flows: 6,
};

/** The folders of src/ that `file` imports from (static and dynamic imports alike). */
function importedFolders(file: string): string[] {
  const text = fs.readFileSync(path.join(repo, file), "utf8");
  const specifiers = [...text.matchAll(/(?:from\s+|import\()"(\.{1,2}\/[^"]+)"/g)].map((m) => m[1] as string);
  return specifiers.map((s) => path.relative("src", path.join(path.dirname(file), s)).split("/")[0] as string);
}

/** What `file` imports, static and dynamic, types too: the files of the repository (relative
 * specifiers, resolved) and the modules it names bare (node:fs, a package). */
function importsOf(file: string): { files: string[]; modules: string[] } {
  const text = fs.readFileSync(path.join(repo, file), "utf8");
  const specifiers = [...text.matchAll(/(?:from\s+|import\(|require\()"([^"]+)"/g)].map((m) => m[1] as string);
  return {
    files: specifiers.filter((s) => s.startsWith(".")).map((s) => `${path.join(path.dirname(file), s)}.ts`),
    modules: specifiers.filter((s) => !s.startsWith(".")),
  };
}

/** Files at the top of src/ that every level may import: the log file and the flags. */
const SHARED = new Set(["log", "args"]);

describe("the dependency order", () => {
  it("holds for every import between src/'s folders", () => {
    const wrong = filesUnder("src")
      .filter((file) => file.split("/").length > 2)
      .flatMap((file) => {
        const from = file.split("/")[1] as string;
        return importedFolders(file)
          .filter((to) => to !== from && !SHARED.has(to))
          .filter((to) => (from === "cni" ? true : to !== "cni" && !((LEVELS[to] ?? -1) > (LEVELS[from] ?? 99))))
          .map((to) => `${file} imports ${to}`);
      });
    expect(wrong).toEqual([]);
  });

  it("keeps the agent off the CLI: what both need lives below them (src/install, src/args.ts)", () => {
    const wrong = filesUnder("src/agent").filter((file) => importedFolders(file).includes("cli"));
    expect(wrong).toEqual([]);
  });

  it("keeps NetworkPolicy's model pure: it imports only itself, src/cni and two pure helpers", () => {
    const model = "src/agent/policy/model/";
    // Pure code outside it, no I/O: getOrMake, for JS Maps (importing nothing); the digest
    // that names a compiled policy (sha256Hex: a computation under either runtime).
    const helpers = ["src/agent/collections.ts", "src/sys/sha256.ts"];
    const wrong = filesUnder(model.slice(0, -1)).flatMap((file) => {
      const { files, modules } = importsOf(file);
      return [
        ...files.filter((to) => !to.startsWith(model) && !to.startsWith("src/cni/") && !helpers.includes(to)),
        ...modules,
      ].map((to) => `${file} imports ${to}`);
    });
    expect(wrong).toEqual([]);
    expect(importsOf("src/agent/collections.ts")).toEqual({ files: [], modules: [] });
  });

  it("keeps src/flows pure: the record and its filter import only each other", () => {
    // The agent and the CLI both read them: nothing of either, nor any I/O, may come along.
    const wrong = filesUnder("src/flows").flatMap((file) => {
      const { files, modules } = importsOf(file);
      return [...files.filter((to) => !to.startsWith("src/flows/")), ...modules].map((to) => `${file} imports ${to}`);
    });
    expect(wrong).toEqual([]);
    expect(importsOf("src/flows/filter.ts").files).toEqual(["src/flows/record.ts"]);
  });

  it("sees the imports it judges", () => {
    expect(importedFolders("src/datapath/fastpath.ts")).toEqual(expect.arrayContaining(["bpf", "cni", "sys"]));
    expect(importedFolders("src/main.ts")).toEqual(expect.arrayContaining(["commands", "cli"]));
    expect(importedFolders("src/agent/main.ts")).toEqual(expect.arrayContaining(["install"]));
    expect(importsOf("src/agent/policy/model/compile.ts").files).toEqual(
      expect.arrayContaining(["src/cni/address.ts", "src/agent/policy/model/objects.ts"]),
    );
    expect(importsOf("src/agent/policy/controller.ts").modules).toEqual([]);
    expect(importsOf("src/agent/policy/writer.ts").modules).toEqual(expect.arrayContaining(["node:fs"]));
  });
});
