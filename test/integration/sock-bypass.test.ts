/**
 * The same-node socket bypass ("sockBypass": true) end to end: pods made by the real
 * executable, TCP peers (tools/sockpeer.py) that check every byte by SHA-256 on both
 * ends, and the bypass's own maps saying which sockets were spliced and how much each
 * pod's sockets redirected.
 *
 * The sock_ops program watches a cgroup v2 of the test's own (a child of the machine's
 * cgroup v2 root, "sockBypassCgroup"), and only the test's peers run in it: attached to
 * the root it would see every socket of the machine.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import type { NodeStatus } from "../../src/cli/status";
import { addPod, delPod, ifindexOf } from "../support/topology";
import {
  cli,
  countersOf,
  eventually,
  exchange,
  exchanges,
  holdConnection,
  MB,
  REPLY,
  type SockEnv,
  socketCookies,
  socketStates,
  sockets,
  sockRecordAt,
  sockRecordOf,
  startPeer,
  startPeerServer,
  useSockEnv,
  ZERO,
} from "./sock-peers";

let env: SockEnv;

useSockEnv((e) => {
  env = e;
});

describe("socket bypass between two pods of one node", () => {
  it.each([
    ["IPv4", "v4"],
    ["IPv6", "v6"],
  ] as const)("splices %s connections both ways, every byte intact", async (_, family) => {
    const server = addPod(env.fx, env.node, "srv");
    const client = addPod(env.fx, env.node, "cli");
    await startPeerServer(env, server.netns, server[family], 5001);
    const size = 8 * MB + 3;
    expect(exchange(env, client.netns, server[family], 5001, size)).toBe(`ok ${size} ${REPLY}`);
    const c = countersOf(env, client);
    const s = countersOf(env, server);
    // Each end's socket was put in the sockhash, and each direction's bytes went through it.
    expect(c.added).toBe(1n);
    expect(s.added).toBe(1n);
    expect(c.redirectedBytes).toBe(BigInt(size));
    expect(s.redirectedBytes).toBeGreaterThanOrEqual(BigInt(REPLY));
    expect(c.passedMsgs + s.passedMsgs).toBe(0n);
  });

  // eager: the client writes before its peer's end may be in the sockhash; what went
  // through the stack must not be overtaken by what is spliced after it.
  it.each(["sendfile", "splice", "small", "eager"])("keeps data intact with %s", async (method) => {
    const server = addPod(env.fx, env.node, "srv");
    const client = addPod(env.fx, env.node, "cli");
    await startPeerServer(env, server.netns, server.v4, 5001);
    const size = method === "small" ? 200_003 : 4 * MB + 1;
    expect(exchange(env, client.netns, server.v4, 5001, size, method)).toBe(`ok ${size} ${REPLY}`);
    const c = countersOf(env, client);
    if (method === "eager") expect(c.redirectedBytes === BigInt(size) || c.passedMsgs > 0n).toBe(true);
    else expect(c.redirectedBytes).toBe(BigInt(size));
  });

  it("holds both ends of a live connection in the sockhash, and none after the client pod's DEL", async () => {
    const server = addPod(env.fx, env.node, "srv");
    const client = addPod(env.fx, env.node, "cli");
    await startPeerServer(env, server.netns, server.v4, 5001);
    await holdConnection(env, client.netns, server.v4, 5001);
    const live = sockets(env);
    expect(live).toHaveLength(2);
    expect(live.map((s) => s.local.ip).sort()).toEqual([server.v4, client.v4].sort());
    const toServer = live.find((s) => s.local.ip === client.v4);
    expect(toServer?.remote).toEqual({ ip: server.v4, port: 5001 });

    type Row = { containerId: string; bypassedSockets: number };
    const rows = JSON.parse(cli(env, "endpoints")) as Row[];
    expect(rows.find((r) => r.containerId === "cli")?.bypassedSockets).toBe(1);
    expect(rows.find((r) => r.containerId === "srv")?.bypassedSockets).toBe(1);
    // The wide table for people: one socket per pod in its SPLICED column.
    const table = cli(env, "endpoints", "wide").split("\n");
    const column = table[0]?.indexOf(" SPLICED") ?? -1;
    expect(column).toBeGreaterThan(0);
    const splicedOf = (id: string) =>
      table
        .find((l) => l.startsWith(`${id} `))
        ?.slice(column)
        .trim()
        .split(/\s+/)[0];
    expect(["cli", "srv"].map(splicedOf)).toEqual(["1", "1"]);
    // Each pod's record: the namespace its sockets live in, and its one socket counted.
    expect(sockRecordOf(env, client)?.sockets).toBe(1);
    expect(sockRecordOf(env, server)?.sockets).toBe(1);
    const status = JSON.parse(cli(env, "status")) as NodeStatus;
    // sk_msg on the sockhash; sock_ops and sock_release on the cgroup.
    expect(status.sockBypass.links.map((l) => l.pin.split("-")[0]).sort()).toEqual([
      "sock/cgroup",
      "sock/release",
      "sock/sk_msg",
    ]);
    expect(status.sockBypass.sockets).toBe(2);
    // The bypass's maps are listed with the node's once it is on.
    expect(status.maps.find((m) => m.name === "nkc_sock_hash")).toEqual({
      name: "nkc_sock_hash",
      kind: "sockhash",
      entries: 2,
      capacity: 65536,
    });
    expect(status.maps.map((m) => m.name)).toEqual(
      expect.arrayContaining(["nkc_sock_stats", "nkc_sock_pods", "nkc_sock_admitted", "nkc_sock_cookies"]),
    );
    expect(cli(env, "status", "table")).toMatch(/^socket bypass +on: .*; 2 sockets spliced$/m);

    const clientIfindex = ifindexOf(env.node.netns, client.hostDevice);
    expect(delPod(client).status).toBe(0);
    // The client's process still holds its socket; the sockhash no longer does.
    expect(sockets(env).filter((s) => s.local.ip === client.v4)).toEqual([]);
    expect(socketStates(env).filter((s) => s.local.ip === client.v4)).toEqual([]);
    expect(socketCookies(env)).toBe(1);
    expect(sockRecordAt(env, clientIfindex)).toBeUndefined();
  });

  it("survives many short connections", { timeout: 180_000 }, async () => {
    const server = addPod(env.fx, env.node, "srv");
    const client = addPod(env.fx, env.node, "cli");
    await startPeerServer(env, server.netns, server.v4, 5001);
    const done = exchanges(env, client.netns, server.v4, 5001, 30, 1000);
    expect(done).toEqual(Array.from({ length: 30 }, (_, i) => expect.stringMatching(new RegExp(`^ok ${1000 + i} `))));
    expect(countersOf(env, client).added).toBe(30n);
    // Closed sockets leave the sockhash by themselves, and their states and counts go with them.
    expect(await eventually(() => sockets(env).length === 0 && socketStates(env).length === 0)).toBe(true);
    expect(socketCookies(env)).toBe(0);
    expect([client, server].map((pod) => sockRecordOf(env, pod)?.sockets)).toEqual([0, 0]);
  });
});

describe("sockets the bypass must leave alone", () => {
  it("leaves a connection established before the programs were attached on the packet path", async () => {
    const server = addPod(env.fx, env.node, "srv");
    const client = addPod(env.fx, env.node, "cli");
    await startPeerServer(env, server.netns, server.v4, 5001);
    // Detach both programs (their pins hold the links), connect, attach them again.
    fs.rmSync(path.join(env.node.bpffsRoot, "sock"), { recursive: true });
    const early = startPeer(env, client.netns, ["client", server.v4, "5001", String(2 * MB), "sendall", "2"]);
    expect(await early.nextLine()).toBe("connected");
    addPod(env.fx, env.node, "third"); // attaches the bypass again
    expect(fs.existsSync(path.join(env.node.bpffsRoot, "sock", "sk_msg"))).toBe(true);
    expect(await early.nextLine()).toBe(`ok ${2 * MB} ${REPLY}`);
    expect(await early.exited).toBe(0);
    expect(countersOf(env, client)).toEqual(ZERO);
    // A connection made now is spliced.
    expect(exchange(env, client.netns, server.v4, 5001, MB)).toMatch(/^ok /);
    expect(countersOf(env, client).redirectedBytes).toBe(BigInt(MB));
  });

  it("never adds a connection between a host process and a pod", async () => {
    const pod = addPod(env.fx, env.node, "srv");
    await startPeerServer(env, pod.netns, pod.v4, 5001);
    // The node's own process, in the watched cgroup, talking to a pod.
    expect(exchange(env, env.node.netns, pod.v4, 5001, MB)).toMatch(/^ok /);
    // And the pod talking to a server of the node.
    await startPeerServer(env, env.node.netns, env.node.wireV4, 5002);
    expect(exchange(env, pod.netns, env.node.wireV4, 5002, MB)).toMatch(/^ok /);
    expect(countersOf(env, pod)).toEqual(ZERO);
    expect(sockets(env)).toEqual([]);
  });

  it("never adds a connection whose other end is a pod of a network without the bypass", async () => {
    const server = addPod(env.fx, env.node, "srv");
    const plain = addPod(env.fx, env.node, "plain", { ...env.node.conf, sockBypass: false });
    await startPeerServer(env, server.netns, server.v4, 5001);
    expect(exchange(env, plain.netns, server.v4, 5001, MB)).toMatch(/^ok /);
    expect(countersOf(env, server)).toEqual(ZERO);
    expect(sockets(env)).toEqual([]);
  });
});
