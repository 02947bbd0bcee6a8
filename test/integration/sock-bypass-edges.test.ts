/**
 * The socket bypass at its edges: connections that close unusually (half-close, RST from
 * either end), MSG_PEEK on a spliced socket, peers reached through DNAT (a Service VIP,
 * a hostPort), and a node where the bypass cannot run. Same setup as sock-bypass.test.ts
 * (sock-peers.ts): pods made by the real executable, peers inside the test's cgroup,
 * SHA-256 on both ends.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { inNs, ping } from "../support/harness";
import { addPod, type Pod } from "../support/topology";
import {
  cli,
  countersOf,
  eventually,
  exchange,
  holdConnection,
  MB,
  REPLY,
  type SockEnv,
  socketCookies,
  socketStates,
  sockets,
  startPeer,
  startPeerServer,
  useSockEnv,
  ZERO,
} from "./sock-peers";

let env: SockEnv;

useSockEnv((e) => {
  env = e;
});

/** Two pods of the node's network, or of one without the bypass. */
function twoPods(bypass = true): { server: Pod; client: Pod } {
  const conf = { ...env.node.conf, sockBypass: bypass };
  return { server: addPod(env.fx, env.node, "srv", conf), client: addPod(env.fx, env.node, "cli", conf) };
}

/** Nothing of the bypass is left for a closed connection: no socket, no state, no cookie. */
async function mapsEmpty(): Promise<void> {
  expect(
    await eventually(() => sockets(env).length === 0 && socketStates(env).length === 0 && socketCookies(env) === 0),
  ).toBe(true);
}

describe("connections that close unusually", () => {
  it("splices both directions of a half-closed connection", async () => {
    const { server, client } = twoPods();
    // The client shuts its side first: the server reads to EOF, then replies.
    await startPeerServer(env, server.netns, server.v4, 5001);
    expect(exchange(env, client.netns, server.v4, 5001, 2 * MB + 1)).toBe(`ok ${2 * MB + 1} ${REPLY}`);
    const afterFirst = countersOf(env, server);
    // The whole reply went after the client's FIN, and went spliced.
    expect(afterFirst.redirectedBytes).toBeGreaterThanOrEqual(BigInt(REPLY));
    expect(countersOf(env, client).redirectedBytes).toBe(BigInt(2 * MB + 1));

    // The server shuts its side first: the client reads to EOF, then sends.
    const reverse = await startPeerServer(env, server.netns, server.v4, 5002, "reverse");
    const size = 4 * MB + 5;
    const [ok, sent, received, digest] = exchange(env, client.netns, server.v4, 5002, size, "reverse").split(" ");
    expect([ok, sent, received]).toEqual(["ok", String(size), String(REPLY)]);
    const [got, bytes, sha, , eagain] = (await reverse.nextLine()).split(" ");
    expect([got, bytes, sha]).toEqual(["got", String(size), digest]);
    // Linux (through 6.18 at least): a blocking recv on a socket in a sockhash waits
    // for one wakeup only and returns EAGAIN when it brought no data; the ACK of the
    // server's own FIN is such a wakeup. The stack's recv never does this. bpf/README.md
    // ("Known limits") says what applications see.
    expect(Number(eagain)).toBeLessThanOrEqual(1);
    const c = countersOf(env, client);
    expect(c.added).toBe(2n);
    expect(c.redirectedBytes).toBe(BigInt(2 * MB + 1 + size));
    expect(countersOf(env, server).redirectedBytes).toBeGreaterThanOrEqual(afterFirst.redirectedBytes + BigInt(REPLY));
    expect(c.passedMsgs + countersOf(env, server).passedMsgs).toBe(0n);
    await mapsEmpty();
  });

  it("on the packet path, a half-closed socket's blocking recv never says EAGAIN", async () => {
    const { server, client } = twoPods(false);
    const reverse = await startPeerServer(env, server.netns, server.v4, 5001, "reverse");
    for (let i = 0; i < 3; i++) {
      const [, , , digest] = exchange(env, client.netns, server.v4, 5001, MB, "reverse").split(" ");
      // The count is the server process's total so far.
      expect(await reverse.nextLine()).toBe(`got ${MB} ${digest} eagain 0`);
    }
    expect(countersOf(env, client)).toEqual(ZERO);
  });

  // The sender closes with SO_LINGER 0 while the receiver is slow: the receiver must see
  // a prefix of what was sent, then EOF or ECONNRESET, never other bytes and never a
  // hang. Seen on 6.18: with the bypass it reads every byte, then ECONNRESET (the
  // sender's write returns once the receiver's queue took the bytes, and they stay
  // readable); on the packet path the RST discards what was still unread.
  it.each([
    ["with", true],
    ["without", false],
  ])("gives the receiver of an RST a prefix of what was sent, %s the bypass", async (_, bypass) => {
    const { server, client } = twoPods(bypass);
    const receiver = await startPeerServer(env, server.netns, server.v4, 5001, "prefix");
    const size = 16 * MB;
    for (let i = 0; i < 3; i++) {
      const sender = startPeer(env, client.netns, ["client", server.v4, "5001", String(size), "abort"]);
      expect(await sender.nextLine()).toBe(`sent ${size}`);
      const [verdict, bytes, how] = (await receiver.nextLine()).split(" ");
      expect(verdict).toBe("prefix");
      expect(Number(bytes)).toBeLessThanOrEqual(size);
      expect(["eof", "reset"]).toContain(how);
    }
    const c = countersOf(env, client);
    if (bypass) expect(c.redirectedBytes).toBeGreaterThan(0n);
    else expect(c).toEqual(ZERO);
    await mapsEmpty();
  });

  it.each([
    ["with", true],
    ["without", false],
  ])("reports an RST from the receiver to a sender still writing, %s the bypass", async (_, bypass) => {
    const { server, client } = twoPods(bypass);
    await startPeerServer(env, server.netns, server.v4, 5001, "sink");
    const sender = startPeer(env, client.netns, ["client", server.v4, "5001", String(MB), "untilreset"]);
    expect(await sender.nextLine()).toMatch(/^reset (ECONNRESET|EPIPE) after \d+$/);
    expect(await sender.exited).toBe(0);
    if (bypass) expect(countersOf(env, client).redirectedBytes).toBeGreaterThanOrEqual(BigInt(MB));
    await mapsEmpty();
  });
});

describe("MSG_PEEK on a spliced socket", () => {
  it("shows the bytes the following recv returns, both ways", async () => {
    const { server, client } = twoPods();
    // The server peeks before every recv too (sockpeer's reply mode).
    await startPeerServer(env, server.netns, server.v4, 5001);
    expect(exchange(env, client.netns, server.v4, 5001, 4 * MB + 7, "peek")).toBe(`ok ${4 * MB + 7} ${REPLY}`);
    expect(countersOf(env, client).redirectedBytes).toBe(BigInt(4 * MB + 7));
    expect(countersOf(env, server).redirectedBytes).toBeGreaterThanOrEqual(BigInt(REPLY));
  });
});

describe("peers reached through DNAT are never spliced", () => {
  const VIP = "10.96.0.10";

  /** A nat PREROUTING rule in the node's netns, removed when the test ends, whatever happens. */
  function dnat(match: string[], to: string): void {
    const rule = ["PREROUTING", "-p", "tcp", ...match, "-j", "DNAT", "--to-destination", to];
    inNs(env.node.netns, "iptables", ["-t", "nat", "-A", ...rule]);
    env.fx.undos.push(() => inNs(env.node.netns, "iptables", ["-t", "nat", "-D", ...rule]));
  }

  it.each([
    ["a Service VIP", () => [VIP, 80] as const],
    ["a hostPort", () => [env.node.wireV4, 8080] as const],
  ])("keeps data intact through %s, with the client's socket on the packet path", async (_, target) => {
    const { server, client } = twoPods();
    const [host, port] = target();
    dnat(["-d", host, "--dport", String(port)], `${server.v4}:5001`);
    await startPeerServer(env, server.netns, server.v4, 5001);

    await holdConnection(env, client.netns, host, port);
    // The server's end has two local pods as its addresses and may be in the sockhash;
    // the client's names the VIP (or the node) as its peer and must not be.
    const live = sockets(env);
    expect(live.filter((s) => s.local.ip === client.v4)).toEqual([]);
    expect(live.every((s) => s.local.ip === server.v4 && s.remote.ip === client.v4)).toBe(true);

    expect(exchange(env, client.netns, host, port, 4 * MB + 3)).toBe(`ok ${4 * MB + 3} ${REPLY}`);
    expect(countersOf(env, client)).toEqual(ZERO);
    // The server's messages found no peer in the sockhash: all of them took the stack.
    const s = countersOf(env, server);
    expect(s.redirectedBytes).toBe(0n);
    if (s.added > 0n) expect(s.passedMsgs).toBeGreaterThan(0n);
  });
});

describe("a node where the bypass cannot run", () => {
  it("adds pods without it when the configured cgroup is not cgroup v2, and status says why", async () => {
    const notCgroup = env.fx.tempDir("nkt-notcg-");
    inNs(env.node.netns, "mount", ["-t", "tmpfs", "nkt-notcg", notCgroup]);
    env.fx.undos.push(() => inNs(env.node.netns, "umount", [notCgroup]));
    const conf = { ...env.node.conf, sockBypassCgroup: notCgroup };
    const server = addPod(env.fx, env.node, "srv", conf);
    const client = addPod(env.fx, env.node, "cli", conf);
    expect(ping(client.netns, server.v4)).toBe(true);
    await startPeerServer(env, server.netns, server.v4, 5001);
    expect(exchange(env, client.netns, server.v4, 5001, MB)).toBe(`ok ${MB} ${REPLY}`);

    // Nothing attached, nothing spliced.
    expect(fs.existsSync(path.join(env.node.bpffsRoot, "sock", "sk_msg"))).toBe(false);
    expect(countersOf(env, client)).toEqual(ZERO);
    expect(sockets(env)).toEqual([]);
    const why = `${notCgroup} is not a cgroup v2 directory`;
    const status = JSON.parse(cli(env, "status")) as { sockBypass: { links: unknown[]; off?: { reason: string } } };
    expect(status.sockBypass.links).toEqual([]);
    expect(status.sockBypass.off?.reason).toBe(why);
    expect(cli(env, "status", "table")).toContain(`socket bypass   off: ${why}`);

    // A later ADD that can run it on the test's cgroup turns it on; the note about the
    // other cgroup stays.
    addPod(env.fx, env.node, "third");
    const text = cli(env, "status", "table");
    expect(text).toMatch(/^socket bypass +on: /m);
    expect(text).toContain(`socket bypass   off for ${notCgroup}: ${why}`);
  });
});
