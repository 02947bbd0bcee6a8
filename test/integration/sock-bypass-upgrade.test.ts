/**
 * The socket bypass across an upgrade of the plugin: pods made by an older build
 * (dist/older, epoch 1) with the bypass on, a spliced connection streaming both ways,
 * then an ADD by this build, which loads its own programs and switches the pinned links
 * to them with BPF_LINK_UPDATE. The live connection must keep flowing, spliced, with
 * every byte intact, and new connections are spliced by the new programs.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { sockLinkPins, sockProgramsRoot } from "../../src/bpf/loader/layout";
import { BpfLink } from "../../src/bpf/loader/links";
import { withPluginBinary } from "../support/harness";
import { addPod } from "../support/topology";
import {
  countersOf,
  eventually,
  exchange,
  MB,
  REPLY,
  type SockEnv,
  socketStates,
  sockets,
  startPeer,
  startPeerServer,
  useSockEnv,
} from "./sock-peers";

const OLDER = path.resolve(__dirname, "../../dist/older/netkit-cni");

let env: SockEnv;

useSockEnv((e) => {
  env = e;
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The programs the two pinned links run now. */
function linkPrograms(): number[] {
  return [sockLinkPins.skMsg(env.node.bpffsRoot), sockLinkPins.cgroup(env.node.bpffsRoot, env.cgroup)].map((pin) => {
    const link = BpfLink.openPinned(pin);
    try {
      return link.programId();
    } finally {
      link.close();
    }
  });
}

/** The epochs of the bypass's program sets pinned under `root` (sock/programs/<epoch>-<hash>). */
const pinnedEpochs = (root: string) => fs.readdirSync(sockProgramsRoot(root)).map((set) => Number(set.split("-")[0]));

describe("socket bypass across an upgrade", () => {
  it("keeps a live spliced connection flowing when a newer build takes over", async () => {
    if (!fs.existsSync(OLDER)) throw new Error(`${OLDER} is missing: make build-older`);
    const [server, client] = withPluginBinary(OLDER, () => [
      addPod(env.fx, env.node, "srv"),
      addPod(env.fx, env.node, "cli"),
    ]);
    expect(pinnedEpochs(env.node.bpffsRoot)).toEqual([1]);
    const before = linkPrograms();

    await startPeerServer(env, server.netns, server.v4, 5001, "duplex");
    const stream = startPeer(env, client.netns, ["client", server.v4, "5001", "0", "duplex"]);
    expect(await stream.nextLine()).toBe("connected");
    await sleep(500);
    expect(sockets(env)).toHaveLength(2);
    const c1 = countersOf(env, client);
    const s1 = countersOf(env, server);
    expect(c1.redirectedBytes).toBeGreaterThan(0n);
    expect(s1.redirectedBytes).toBeGreaterThan(0n);

    // This build's first ADD on the node: its programs, the links switched to them.
    addPod(env.fx, env.node, "new");
    const after = linkPrograms();
    expect(after[0]).not.toBe(before[0]);
    expect(after[1]).not.toBe(before[1]);
    expect(pinnedEpochs(env.node.bpffsRoot)).not.toContain(1);

    // Still streaming, still spliced, both ways; nothing fell back to the stack.
    await sleep(500);
    const c2 = countersOf(env, client);
    const s2 = countersOf(env, server);
    expect(c2.redirectedBytes).toBeGreaterThan(c1.redirectedBytes);
    expect(s2.redirectedBytes).toBeGreaterThan(s1.redirectedBytes);
    expect(c2.passedMsgs + s2.passedMsgs).toBe(0n);
    expect(sockets(env)).toHaveLength(2);

    stream.child.stdin?.end("stop\n");
    const [ok, sent, received] = (await stream.nextLine()).split(" ");
    expect(ok).toBe("ok");
    expect(Number(sent)).toBeGreaterThan(0);
    expect(Number(received)).toBeGreaterThan(0);
    expect(await stream.exited).toBe(0);

    // A connection made now, between the older build's pods, is spliced by the new programs.
    await startPeerServer(env, server.netns, server.v4, 5002);
    const added = countersOf(env, client).added;
    const redirected = countersOf(env, client).redirectedBytes;
    expect(exchange(env, client.netns, server.v4, 5002, 2 * MB)).toBe(`ok ${2 * MB} ${REPLY}`);
    expect(countersOf(env, client).added).toBe(added + 1n);
    expect(countersOf(env, client).redirectedBytes).toBe(redirected + BigInt(2 * MB));
    // The new programs also saw the older ones' sockets close: no state is left.
    expect(await eventually(() => sockets(env).length === 0 && socketStates(env).length === 0)).toBe(true);
  });
});
