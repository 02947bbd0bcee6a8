/**
 * The cluster-CIDR trie on a node several networks share: each network's list is
 * recorded in the pinned nkc_net_cidrs map and the trie holds their union.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { decodeCidrKey } from "../../src/bpf/fastpath/abi";
import { NETWORK_CIDRS_SPEC, setNetworkClusterCidrs } from "../../src/bpf/fastpath/cluster";
import { BpfMap } from "../../src/bpf/loader/maps";
import { BPF_MAP_TYPE } from "../../src/sys/bpf-uapi";
import { TestBpffs } from "./helpers/bpffs";

const BPF_F_NO_PREALLOC = 1;

let bpffs: TestBpffs | undefined;
let trie: BpfMap | undefined;

beforeEach(() => {
  bpffs = TestBpffs.mount();
  // nkc_cluster's layout, small enough to fill.
  trie = BpfMap.create({
    name: "nkc_cluster",
    type: BPF_MAP_TYPE.LPM_TRIE,
    keySize: 24,
    valueSize: 4,
    maxEntries: 4,
    flags: BPF_F_NO_PREALLOC,
  });
});
afterEach(() => {
  try {
    trie?.close();
  } finally {
    bpffs?.release();
    trie = undefined;
    bpffs = undefined;
  }
});

function fixtures(): { root: string; map: BpfMap } {
  if (!bpffs || !trie) throw new Error("no bpffs or trie");
  return { root: bpffs.root, map: trie };
}
const trieCidrs = () => [...fixtures().map.keys()].map(decodeCidrKey).sort();
const set = (network: string | undefined, clusterCidrs: string[]) =>
  setNetworkClusterCidrs(fixtures().root, fixtures().map, { network, clusterCidrs });

describe("cluster CIDRs of several networks", () => {
  it("holds the union, replaces one network's list without touching the others'", () => {
    set("net-a", ["10.1.0.0/16", "fd01::/16"]);
    set("net-b", ["10.2.0.0/16"]);
    expect(trieCidrs()).toEqual(["10.1.0.0/16", "10.2.0.0/16", "fd01::/16"]);
    set("net-a", ["10.1.0.0/17"]);
    expect(trieCidrs()).toEqual(["10.1.0.0/17", "10.2.0.0/16"]);
    set("net-b", []);
    expect(trieCidrs()).toEqual(["10.1.0.0/17"]);
  });

  it("keeps a CIDR two networks list until neither does", () => {
    set("net-a", ["10.9.0.0/16"]);
    set("net-b", ["10.9.0.0/16"]);
    set("net-a", []);
    expect(trieCidrs()).toEqual(["10.9.0.0/16"]);
    set("net-b", []);
    expect(trieCidrs()).toEqual([]);
  });

  it("records the lists in a map pinned with the node's maps, found again by the next call", () => {
    set("net-a", ["10.1.0.0/16"]);
    expect(fs.existsSync(path.join(fixtures().root, "maps", NETWORK_CIDRS_SPEC.name))).toBe(true);
    // A second trie (a reloaded node) gets the union from the records alone.
    const before = fixtures().map;
    trie = BpfMap.create(before.spec);
    before.close();
    set("net-b", ["10.2.0.0/16"]);
    expect(trieCidrs()).toEqual(["10.1.0.0/16", "10.2.0.0/16"]);
  });

  it("gives callers that name no network one list of their own", () => {
    set(undefined, ["10.1.0.0/16"]);
    set("net-a", ["10.2.0.0/16"]);
    set(undefined, ["10.3.0.0/16"]);
    expect(trieCidrs()).toEqual(["10.2.0.0/16", "10.3.0.0/16"]);
  });

  it("refuses a union larger than the trie before changing anything", () => {
    set("net-a", ["10.1.0.0/16", "10.2.0.0/16", "10.3.0.0/16"]);
    expect(() => set("net-b", ["10.4.0.0/16", "10.5.0.0/16"])).toThrow(/networks on this node have 5 .* holds 4/);
    expect(trieCidrs()).toEqual(["10.1.0.0/16", "10.2.0.0/16", "10.3.0.0/16"]);
    set("net-b", ["10.4.0.0/16"]);
    expect(trieCidrs()).toEqual(["10.1.0.0/16", "10.2.0.0/16", "10.3.0.0/16", "10.4.0.0/16"]);
  });
});
