/**
 * Listing who holds addresses in a host-local-format store (ipam/holders.ts), from files
 * written here the way host-local and its older versions write them.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { hostLocalStoreDir, knownTo, listHolders } from "../../../src/ipam/holders";
import { cleanupDirs, tempDataDir } from "./helpers";

afterEach(cleanupDirs);

/** A store directory holding `files` (name → content). */
function store(files: Record<string, string>): string {
  const dir = path.join(tempDataDir(), "net");
  fs.mkdirSync(dir);
  for (const [name, content] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), content);
  return dir;
}

describe("listHolders", () => {
  it("lists each attachment once with all its addresses, skipping files that are no reservation", () => {
    const dir = store({
      // Dual stack: two files, one attachment.
      "10.9.0.5": "pod-a\r\neth0",
      "fd09::5": "pod-a\r\neth0",
      // A second interface of the same pod is another attachment.
      "10.9.0.6": "pod-a\r\nnet1",
      // Older host-local wrote only the container ID.
      "10.9.0.7": "pod-old",
      "fd09::7": "pod-old",
      // Not reservations.
      "last_reserved_ip.0": "10.9.0.7",
      "last_reserved_ip.1": "fd09::7",
      lock: "",
    });
    expect(listHolders(dir)).toEqual([
      { containerId: "pod-a", ifname: "eth0", ips: ["10.9.0.5", "fd09::5"] },
      { containerId: "pod-a", ifname: "net1", ips: ["10.9.0.6"] },
      { containerId: "pod-old", ifname: undefined, ips: ["10.9.0.7", "fd09::7"] },
    ]);
  });

  it("reads names as the embedded IPAM does: any spelling of an address, and nothing else", () => {
    const dir = store({
      "fd09:0:0::0009": "pod-b\r\neth0",
      "10.9.0.9": "pod-b\r\neth0",
      // host-local writes '_' for ':' only on Windows: on Linux this names no reservation.
      fd09__10: "pod-c\r\neth0",
      "10.9.0.300": "pod-c\r\neth0",
      ".netkit-cni-tmp.pending": "pod-c\r\neth0",
    });
    fs.mkdirSync(path.join(dir, "10.9.0.11"));
    expect(listHolders(dir)).toEqual([{ containerId: "pod-b", ifname: "eth0", ips: ["10.9.0.9", "fd09::9"] }]);
  });

  it("leaves out reservations naming no container, and reads '<id>\\r\\n' as the old format", () => {
    const dir = store({
      // A node crash (or a writer still at work) can leave an empty reservation.
      "10.9.0.12": "",
      "10.9.0.13": "pod-d\r\n",
      "10.9.0.14": "  pod-d  \n",
      "10.9.0.15": "pod-e\r\neth0\n",
    });
    expect(listHolders(dir)).toEqual([
      { containerId: "pod-d", ifname: undefined, ips: ["10.9.0.13", "10.9.0.14"] },
      { containerId: "pod-e", ifname: "eth0", ips: ["10.9.0.15"] },
    ]);
  });

  it("finds nothing in a store that does not exist", () => {
    expect(listHolders(path.join(tempDataDir(), "never-used"))).toEqual([]);
  });
});

describe("knownTo", () => {
  const known = knownTo([{ containerId: "pod-a", ifname: "eth0" }]);

  it("knows exactly the valid attachments", () => {
    expect(known({ containerId: "pod-a", ifname: "eth0" })).toBe(true);
    expect(known({ containerId: "pod-a", ifname: "net1" })).toBe(false);
    expect(known({ containerId: "pod-b", ifname: "eth0" })).toBe(false);
  });

  it("keeps an old-format reservation while any valid attachment has its container", () => {
    expect(known({ containerId: "pod-a", ifname: undefined })).toBe(true);
    expect(known({ containerId: "pod-b", ifname: undefined })).toBe(false);
  });
});

describe("hostLocalStoreDir", () => {
  it("is <dataDir>/<network>, with host-local's default for an absent or empty dataDir", () => {
    expect(hostLocalStoreDir({ type: "host-local", dataDir: "/srv/cni" }, "pods")).toBe("/srv/cni/pods");
    expect(hostLocalStoreDir({ type: "host-local" }, "pods")).toBe("/var/lib/cni/networks/pods");
    expect(hostLocalStoreDir({ type: "host-local", dataDir: "" }, "pods")).toBe("/var/lib/cni/networks/pods");
  });

  it("is undefined for a dataDir host-local could not parse", () => {
    expect(hostLocalStoreDir({ type: "host-local", dataDir: 7 }, "pods")).toBeUndefined();
  });
});
