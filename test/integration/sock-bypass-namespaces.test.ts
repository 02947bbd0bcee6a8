/**
 * The socket bypass bound to the pods' network namespaces, and each pod's bound on the
 * sockhash. A namespace of its own (an unprivileged user namespace is enough) can give
 * itself any pod's address and hold its ports; the bypass must admit a socket only from
 * the namespace its pod's ADD recorded, never take anything from a socket it did not
 * admit, and never let one pod fill the node-wide sockhash. Same setup as
 * sock-bypass.test.ts (sock-peers.ts): pods made by the real executable, peers inside
 * the test's cgroup, SHA-256 on both ends.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { SOCK_PER_POD } from "../../src/bpf/sock/abi";
import type { NodeStatus } from "../../src/cli/status";
import type { EndpointRow } from "../../src/commands/endpoints";
import { inNs, runPlugin } from "../support/harness";
import { addPod, delPod, ifindexOf } from "../support/topology";
import {
  cli,
  countersOf,
  eventually,
  exchange,
  holdConnection,
  MB,
  PEER_COMMAND,
  REPLY,
  type SockEnv,
  socketCookies,
  socketStates,
  sockets,
  sockRecordAt,
  sockRecordOf,
  startPeer,
  startPeerServer,
  startScript,
  useSockEnv,
} from "./sock-peers";

let env: SockEnv;

useSockEnv((e) => {
  env = e;
});

const NOBODY = 65534;

describe("sockets from another namespace", () => {
  it("gives nothing to an unprivileged namespace that takes two pods' addresses and the client's port", async () => {
    const server = addPod(env.fx, env.node, "srv");
    const client = addPod(env.fx, env.node, "cli");
    await startPeerServer(env, server.netns, server.v4, 5001);
    // Nobody, in a user and network namespace of its own and in the watched cgroup, gives
    // itself both pods' addresses and opens a connection between them from the port the
    // real client will use, keeping the end that has the server's address.
    const squatter = startScript(
      env,
      `exec setpriv --reuid=${NOBODY} --regid=${NOBODY} --clear-groups unshare -Urn sh -c ` +
        `'ip link set lo up && ip addr add ${client.v4}/32 dev lo && ip addr add ${server.v4}/32 dev lo && ` +
        `exec ${PEER_COMMAND} squat "$@"' squat "$@"`,
      [client.v4, server.v4, "5001", "40000"],
    );
    expect(await squatter.nextLine()).toBe("ready");
    expect(fs.readFileSync(`/proc/${squatter.child.pid}/status`, "utf8")).toMatch(
      new RegExp(`^Uid:\\t${NOBODY}\\t`, "m"),
    );

    // The real client, from that port, to the real server: every byte reaches the server.
    const size = 2 * MB + 7;
    expect(exchange(env, client.netns, server.v4, 5001, size, "sendall", 40000)).toBe(`ok ${size} ${REPLY}`);
    squatter.child.stdin?.end("stop\n");
    expect(await squatter.nextLine()).toBe("stolen 0");
    // Spliced all the same, between the two real sockets.
    expect(countersOf(env, client).redirectedBytes).toBe(BigInt(size));
    expect(countersOf(env, client).added).toBe(1n);
    // Each squatting socket was refused on the pod whose address it had.
    expect(sockRecordOf(env, client)?.refusedNetns).toBe(1n);
    expect(sockRecordOf(env, server)?.refusedNetns).toBe(1n);
    const rows = JSON.parse(cli(env, "endpoints")) as EndpointRow[];
    expect(rows.find((r) => r.containerId === "srv")?.sockRecord?.refusedNetns).toBe(1);
    const status = JSON.parse(cli(env, "status")) as NodeStatus;
    expect(status.sockBypass.refusedNetns).toBe(2);
    expect(cli(env, "status", "table")).toMatch(/; refused: 2 from another network namespace$/m);
  });

  it("records the namespace a socket made inside the pod reports, and the programs agree", async () => {
    const server = addPod(env.fx, env.node, "srv");
    const client = addPod(env.fx, env.node, "cli");
    for (const pod of [server, client]) {
      const seen = startPeer(env, pod.netns, ["cookie"]);
      expect(sockRecordOf(env, pod)?.netnsCookie).toBe(Buffer.from(await seen.nextLine(), "hex").readBigUInt64LE());
    }
    // bpf_get_netns_cookie() in sock_ops and sk_msg gave the same value: spliced.
    await startPeerServer(env, server.netns, server.v4, 5001);
    expect(exchange(env, client.netns, server.v4, 5001, MB)).toBe(`ok ${MB} ${REPLY}`);
    expect(countersOf(env, client).redirectedBytes).toBe(BigInt(MB));
  });
});

describe("the namespace records", () => {
  it("goes with the pod: DEL removes its record, GC the record of a device that is gone", () => {
    const deleted = addPod(env.fx, env.node, "deleted");
    const vanished = addPod(env.fx, env.node, "vanished");
    const kept = addPod(env.fx, env.node, "kept");
    const deletedIfindex = ifindexOf(env.node.netns, deleted.hostDevice);
    const vanishedIfindex = ifindexOf(env.node.netns, vanished.hostDevice);
    expect(sockRecordAt(env, deletedIfindex)).toBeDefined();
    expect(delPod(deleted).status).toBe(0);
    expect(sockRecordAt(env, deletedIfindex)).toBeUndefined();

    inNs(env.node.netns, "ip", ["link", "del", vanished.hostDevice]);
    expect(sockRecordAt(env, vanishedIfindex)).toBeDefined();
    const valid = [
      { containerID: "kept", ifname: "eth0" },
      { containerID: "vanished", ifname: "eth0" },
    ];
    const gc = runPlugin(env.node.netns, "GC", {}, { ...env.node.conf, "cni.dev/valid-attachments": valid });
    expect(gc.status, gc.stdout).toBe(0);
    expect(sockRecordAt(env, vanishedIfindex)).toBeUndefined();
    expect(sockRecordOf(env, kept)).toBeDefined();
  });
});

describe("a socket whose key is taken", () => {
  it("leaves the admitted socket's state alone when the same program sees it again", async () => {
    // Two networks watch nested cgroups: both links run nkc_sockops for every socket of
    // the inner one, so each socket is offered twice and its second admission is refused.
    const inner = path.join(env.cgroup, "inner");
    fs.mkdirSync(inner);
    const server = addPod(env.fx, env.node, "srv");
    const client = addPod(env.fx, env.node, "cli", { ...env.node.conf, sockBypassCgroup: inner });
    const nested = { ...env, cgroup: inner };
    await startPeerServer(nested, server.netns, server.v4, 5001);
    await holdConnection(nested, client.netns, server.v4, 5001);
    const size = 2 * MB + 3;
    expect(exchange(nested, client.netns, server.v4, 5001, size)).toBe(`ok ${size} ${REPLY}`);
    expect(countersOf(env, client).redirectedBytes).toBe(BigInt(size));
    expect(countersOf(env, client).passedMsgs).toBe(0n);
    // What is left is the held connection, each end admitted once with its state: the
    // closed one's sockets were counted once and released once (the second release hook
    // found nothing of theirs).
    const held = () => [client, server].map((pod) => sockRecordOf(env, pod)?.sockets);
    expect(await eventually(() => sockets(env).length === 2 && held().every((n) => n === 1))).toBe(true);
    expect(socketStates(env)).toHaveLength(2);
  });
});

describe("each pod's bound on the sockhash", () => {
  it("refuses a pod's sockets past its bound while another pod keeps its bypass, and gives them back on close", async () => {
    const hog = addPod(env.fx, env.node, "hog");
    const server = addPod(env.fx, env.node, "srv");
    const client = addPod(env.fx, env.node, "cli");
    // Connections to itself (over its loopback): both ends are the hog's sockets.
    inNs(hog.netns, "ip", ["link", "set", "lo", "up"]);
    const connections = SOCK_PER_POD / 2 + 52;
    const hogger = startPeer(env, hog.netns, ["hog", hog.v4, "5001", String(connections)]);
    expect(await hogger.nextLine(60_000)).toBe(`held ${connections}`);
    expect(sockets(env).filter((s) => s.local.ip === hog.v4)).toHaveLength(SOCK_PER_POD);
    const record = sockRecordOf(env, hog);
    expect(record?.sockets).toBe(SOCK_PER_POD);
    expect(record?.refusedBound).toBe(BigInt(2 * connections - SOCK_PER_POD));
    expect(cli(env, "status", "table")).toMatch(/; refused: 104 over a pod's bound of 4096$/m);

    await startPeerServer(env, server.netns, server.v4, 5002);
    expect(exchange(env, client.netns, server.v4, 5002, MB)).toBe(`ok ${MB} ${REPLY}`);
    expect(countersOf(env, client).redirectedBytes).toBe(BigInt(MB));

    hogger.child.kill("SIGKILL");
    expect(await hogger.exited).not.toBe(0);
    expect(await eventually(() => sockRecordOf(env, hog)?.sockets === 0 && sockets(env).length === 0, 10_000)).toBe(
      true,
    );
    expect(socketStates(env)).toEqual([]);
    expect(socketCookies(env)).toBe(0);
  });

  it("counts a reset socket for as long as its process holds it in the sockhash", async () => {
    const server = addPod(env.fx, env.node, "srv");
    const client = addPod(env.fx, env.node, "cli");
    await startPeerServer(env, server.netns, server.v4, 5001, "reset");
    const holder = startPeer(env, client.netns, ["hold", server.v4, "5001"]);
    expect(await holder.nextLine()).toBe("connected");
    // The server's end is closed (released); the client's was reset and is still open.
    expect(await eventually(() => sockRecordOf(env, server)?.sockets === 0)).toBe(true);
    expect(sockets(env).map((s) => s.local.ip)).toEqual([client.v4]);
    expect(sockRecordOf(env, client)?.sockets).toBe(1);
    holder.child.kill("SIGKILL");
    expect(await eventually(() => sockRecordOf(env, client)?.sockets === 0 && sockets(env).length === 0)).toBe(true);
  });
});
