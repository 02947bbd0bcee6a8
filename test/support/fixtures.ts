/**
 * The per-test fixtures test files share, as vitest hooks: each makes what a test needs
 * before it (beforeEach), removes it after (afterEach), and hands it to the file through
 * `set`, which assigns the file's own variables, so the tests read `fx`, `a`, `node` as
 * they always did. Hooks a file registers after one of these run after its beforeEach
 * and before its afterEach. Not for the bench (harness.ts and topology.ts are its):
 * this file imports vitest.
 */
import { afterEach, beforeEach } from "vitest";
import { Fixture } from "./harness";
import { StandInApiServer } from "./kube-apiserver";
import { type ClusterNode, makeCluster } from "./topology";

interface Cluster {
  fx: Fixture;
  a: ClusterNode;
  b: ClusterNode;
}

/**
 * A two-node cluster of the test's own (topology.ts makeCluster: nodes A and B joined by
 * a wire), `extraConf` over both nodes' network config.
 */
export function useCluster(set: (cluster: Cluster) => void): void;
export function useCluster(extraConf: Record<string, unknown>, set: (cluster: Cluster) => void): void;
export function useCluster(
  ...args: [(cluster: Cluster) => void] | [Record<string, unknown>, (cluster: Cluster) => void]
): void {
  const [extraConf, set] = args.length === 1 ? [{}, args[0]] : args;
  let fx: Fixture | undefined;
  beforeEach(() => {
    fx = new Fixture();
    const [a, b] = makeCluster(fx, extraConf);
    set({ fx, a, b });
  });
  afterEach(() => fx?.cleanup());
}

interface TestNode {
  fx: Fixture;
  /** The node's netns (Fixture.makeNode: lo up, uplink0 carrying the node's addresses). */
  node: string;
  /** A directory for the test's IPAM state and the plugin's log. */
  dataDir: string;
}

/** A node of the test's own, with `v4` and `v6` on its uplink, and a data directory. */
export function useTestNode(
  opts: { v4: string; v6: string; dataDirPrefix: string },
  set: (node: TestNode) => void,
): void {
  let fx: Fixture | undefined;
  beforeEach(() => {
    fx = new Fixture();
    const node = fx.makeNode(opts.v4, opts.v6);
    const dataDir = fx.tempDir(opts.dataDirPrefix);
    set({ fx, node, dataDir });
  });
  afterEach(() => fx?.cleanup());
}

interface StandInApi {
  fx: Fixture;
  api: StandInApiServer;
}

/**
 * The stand-in API server (kube-apiserver.ts), started for each test with the agent's
 * token and a bookmark every 500 ms, and stopped after it.
 */
export function useStandInApi(set: (standIn: StandInApi) => void): void {
  let fx: Fixture | undefined;
  let api: StandInApiServer | undefined;
  beforeEach(async () => {
    fx = new Fixture();
    api = new StandInApiServer(fx.tempDir("nkt-api-"), "agent-token", 500);
    await api.start();
    set({ fx, api });
  });
  afterEach(async () => {
    await api?.stop();
    fx?.cleanup();
  });
}
