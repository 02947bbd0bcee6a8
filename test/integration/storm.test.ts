/**
 * 200 pods added and deleted at concurrency 16 on one node (2 cores; 48 in the netkit
 * VM): no failure, no
 * address handed out twice, nothing left afterwards. Prints the wall times; speed is
 * judged by the benchmarks, not here.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, beforeEach, expect, it } from "vitest";
import { endpointMapEntries, pinnedEndpointDevices } from "../../src/datapath/fastpath";
import { Fixture, type PluginRun, pluginLinks, runPluginAsync } from "./harness";
import { type ClusterNode, makeCluster } from "./topology";

// The single-CPU netkit VM runs syscalls an order of magnitude slower: a smaller storm there.
const PODS = process.env.NETKIT_VM ? 48 : 200;
const CONCURRENCY = 16;

let fx: Fixture;
let node: ClusterNode;

beforeEach(() => {
  fx = new Fixture();
  [node] = makeCluster(fx);
});
afterEach(() => fx.cleanup());

async function pool<T>(count: number, concurrency: number, task: (i: number) => Promise<T>): Promise<T[]> {
  const results: T[] = new Array(count);
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const i = next++;
      results[i] = await task(i);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return results;
}

it(`adds and deletes ${PODS} pods at concurrency ${CONCURRENCY} without failures, duplicates or residue`, async () => {
  const pods = Array.from({ length: PODS }, (_, i) => ({
    containerId: `storm-${i}`,
    netns: `/run/netns/${fx.makeNetns("nks")}`,
    ifname: "eth0",
  }));
  const conf = node.conf;

  let t0 = performance.now();
  const adds: PluginRun[] = await pool(PODS, CONCURRENCY, (i) =>
    runPluginAsync(node.netns, "ADD", pods[i] ?? {}, conf),
  );
  const addWall = performance.now() - t0;
  const addFailures = adds.filter((r) => r.status !== 0);
  const v4 = adds.map((r) => (r.json?.ips as { address: string }[] | undefined)?.[0]?.address);

  t0 = performance.now();
  const dels = await pool(PODS, CONCURRENCY, (i) =>
    runPluginAsync(node.netns, "DEL", pods[i] ?? {}, { ...conf, prevResult: adds[i]?.json }),
  );
  const delWall = performance.now() - t0;
  const delFailures = dels.filter((r) => r.status !== 0);
  console.log(
    `storm: ${PODS} ADDs in ${(addWall / 1000).toFixed(1)} s, ${PODS} DELs in ${(delWall / 1000).toFixed(1)} s ` +
      `(concurrency ${CONCURRENCY}); failures: ${addFailures.length} ADD, ${delFailures.length} DEL`,
  );
  expect(addFailures.map((r) => r.stdout)).toEqual([]);
  expect(delFailures.map((r) => r.stdout)).toEqual([]);
  expect(new Set(v4).size).toBe(PODS);

  const ipamDir = path.join((conf.ipam as { dataDir: string }).dataDir, "cluster");
  expect(fs.readdirSync(ipamDir).filter((f) => /^[0-9a-f.:]+$/.test(f) && /[.:]/.test(f))).toEqual([]);
  expect(pluginLinks(node.netns)).toEqual([]);
  expect(pinnedEndpointDevices(node.bpffsRoot)).toEqual([]);
  expect(endpointMapEntries(node.bpffsRoot).size).toBe(0);
}, 600_000);
