/**
 * NetworkPolicy on a cluster's second day, tried as an attacker would on two dual-stack
 * nodes with the agents as the DaemonSet runs them (netpol-cluster.ts): what an agent
 * restart, a revoked allow, an address's next owner, neighbour discovery and a full map
 * must never let through. Pods: x/a, x/c and y/a on node-1; x/b and y/b on node-2.
 * Each test sets its policies and waits until fresh flows answer as they say; then
 * probes what the second day may not change.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { mapPin } from "../../src/bpf/loader/layout";
import { BpfMap } from "../../src/bpf/loader/maps";
import { peerKey, portKey, ruleBits } from "../../src/bpf/policy/abi";
import { AF_INET6 } from "../../src/cni/address";
import { ceiling } from "../support/ceiling";
import { BINARY, inNs } from "../support/harness";
import type { RawPolicy } from "../support/policy-model";
import { scrape } from "./agent-harness";
import { type PodHere, PolicyCluster, type PolicyNode, PROBE, policy } from "./netpol-cluster";

let c: PolicyCluster;
const pod = (key: string) => c.pods.get(key) as PodHere;
const FAMILIES = [4, 6] as const;
/** The port tools/netpol-probe.py holds connections open on. */
const HOLD_PORT = 82;

let applied: RawPolicy[] = [];
/** The API's policies become exactly `policies`. */
function setPolicies(policies: RawPolicy[]): void {
  for (const p of applied) {
    if (!policies.some((q) => q.metadata.name === p.metadata.name && q.metadata.namespace === p.metadata.namespace))
      c.api.remove("networkpolicies", p.metadata.namespace, p.metadata.name);
  }
  for (const p of policies) c.api.put("networkpolicies", p as unknown as Record<string, unknown>);
  applied = policies;
}

interface Probe {
  from: string;
  to: string;
  port: number;
  proto: "tcp" | "udp";
  family: 4 | 6;
  /** Sent from this source port. */
  sport?: number;
}

const target = (p: Probe) => {
  const to = pod(p.to);
  return `${p.family === 4 ? to.v4 : to.v6} ${p.port} ${p.proto}${p.sport ? ` sport=${p.sport}` : ""}`;
};

const name = (p: Probe) => `${p.from}>${p.to}:${p.port}/${p.proto}/${p.family}${p.sport ? `@${p.sport}` : ""}`;

/** What each probe observes now, as "from>to:port/proto/family yes|no", in the order given (one probe process per source). */
async function observe(probes: Probe[]): Promise<string[]> {
  const answers = new Map<Probe, string>();
  for (const from of new Set(probes.map((p) => p.from))) {
    const mine = probes.filter((p) => p.from === from);
    const lines = (await c.probeFrom(pod(from).netns, mine.map(target))).trim().split("\n");
    for (const [i, p] of mine.entries()) answers.set(p, lines[i]?.endsWith(" yes") ? "yes" : "no");
  }
  return probes.map((p) => `${name(p)} ${answers.get(p)}`);
}

const expectation = (probes: Probe[], answer: "yes" | "no") => probes.map((p) => `${name(p)} ${answer}`);

/** Waits until every probe answers `answer` (a change takes effect within `ms`), then checks once more. */
async function expectAnswers(probes: Probe[], answer: "yes" | "no", ms = ceiling(20_000)): Promise<void> {
  const end = Date.now() + ms;
  let seen = await observe(probes);
  while (JSON.stringify(seen) !== JSON.stringify(expectation(probes, answer)) && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 300));
    seen = await observe(probes);
  }
  const status = c.nodes.map(
    (n) => `${n.name}: ${JSON.stringify(JSON.parse(scrape(n.agentNode, "/status")[1] || "{}").networkPolicy)}`,
  );
  expect(seen, status.join("\n")).toEqual(expectation(probes, answer));
}

/** Probes of `from` to `to` on one port, both families (and both protocols unless given). */
const probes = (from: string, to: string, port: number, protos: ("tcp" | "udp")[] = ["tcp"], sport?: number): Probe[] =>
  FAMILIES.flatMap((family) => protos.map((proto) => ({ from, to, port, proto, family, sport })));

/** A TCP connection held open from `from` to `to`'s HOLD_PORT: `exchange()` sends a line, true when its echo came back. */
class Held {
  private readonly child: ChildProcess;
  private lines: string[] = [];
  private readonly waiting: ((line: string) => void)[] = [];

  constructor(from: string, to: string, family: 4 | 6) {
    const dst = family === 4 ? pod(to).v4 : pod(to).v6;
    this.child = spawn("nsenter", [`--net=/run/netns/${pod(from).netns}`, "python3", PROBE, "hold", dst], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    c.fx.processes.push({ kill: () => this.child.kill("SIGKILL") });
    let buffered = "";
    this.child.stdout?.on("data", (d: Buffer) => {
      buffered += d.toString();
      const parts = buffered.split("\n");
      buffered = parts.pop() ?? "";
      for (const line of parts) {
        const w = this.waiting.shift();
        if (w) w(line);
        else this.lines.push(line);
      }
    });
  }

  private next(): Promise<string> {
    const line = this.lines.shift();
    if (line !== undefined) return Promise.resolve(line);
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  async ready(): Promise<void> {
    expect(await this.next()).toBe("ready");
  }

  async exchange(): Promise<boolean> {
    this.child.stdin?.write("ping\n");
    return (await this.next()) === "ok";
  }

  close(): void {
    this.child.kill("SIGKILL");
  }
}

/** fd99::<i>: addresses no pod has. */
function junkAddress(i: number): Buffer {
  const b = Buffer.alloc(16);
  b.writeUInt16BE(0xfd99, 0);
  b.writeUInt32BE(i, 12);
  return b;
}

const denyAllX = policy("x", "deny-all", { podSelector: {} });
/** x/a admits namespace y on TCP 80, UDP 80 and the held connections' port. */
const allowYIntoA = policy("x", "allow-y", {
  podSelector: { matchLabels: { pod: "a" } },
  ingress: [
    {
      from: [{ namespaceSelector: { matchLabels: { ns: "y" } } }],
      ports: [
        { port: 80, protocol: "TCP" },
        { port: 80, protocol: "UDP" },
        { port: HOLD_PORT, protocol: "TCP" },
      ],
    },
  ],
});

describe("NetworkPolicy on the second day, two nodes, agents in their DaemonSet containers", () => {
  beforeAll(async () => {
    c = new PolicyCluster();
    await c.start(2, ["x", "y"]);
    const [n1, n2] = c.nodes as [PolicyNode, PolicyNode];
    for (const [key, node] of [
      ["x/a", n1],
      ["x/b", n2],
      ["x/c", n1],
      ["y/a", n1],
      ["y/b", n2],
    ] as const)
      await c.addPod(key, node);
  }, ceiling(180_000));

  afterAll(async () => {
    await c?.stop();
  });

  afterEach(async () => {
    setPolicies([]);
    await expectAnswers(probes("y/a", "x/c", 80), "yes");
  }, ceiling(60_000));

  it(
    "changes no verdict at an agent restart, and a restart after a policy went inherits nothing of it",
    async () => {
      setPolicies([denyAllX, allowYIntoA]);
      const allowed = [...probes("y/a", "x/a", 80, ["tcp", "udp"]), ...probes("y/b", "x/a", 80, ["tcp", "udp"])];
      const denied = [...probes("y/a", "x/c", 80), ...probes("y/b", "x/c", 80), ...probes("y/a", "x/a", 81)];
      await expectAnswers(allowed, "yes");
      await expectAnswers(denied, "no");
      // Held connections on one node and across.
      const held = [new Held("y/a", "x/a", 4), new Held("y/b", "x/a", 6)];
      for (const h of held) await h.ready();
      for (const h of held) expect(await h.exchange()).toBe(true);

      // A restart with the policies as they were: the same answers, and the held
      // connections carry on (their verdicts are judged again under the new run's rules).
      await c.restartAgents();
      expect(await observe([...allowed, ...denied])).toEqual([
        ...expectation(allowed, "yes"),
        ...expectation(denied, "no"),
      ]);
      for (const h of held) expect(await h.exchange()).toBe(true);

      // The allow goes while no agent runs. The new run numbers its slots afresh: x/a and
      // x/c now share a deny-all slot, and nothing the previous run wrote may answer for it.
      await c.restartAgents(true, () => c.api.remove("networkpolicies", "x", "allow-y"));
      applied = [denyAllX];
      await expectAnswers([...allowed.filter((p) => p.proto === "tcp"), ...denied], "no", ceiling(5_000));
      // An established flow its rules no longer admit is cut at its next packet.
      for (const h of held) expect(await h.exchange()).toBe(false);
      for (const h of held) h.close();
    },
    ceiling(240_000),
  );

  it(
    "refuses, once an allow is revoked, new flows from the source ports it let through, on one node and across",
    async () => {
      setPolicies([denyAllX, allowYIntoA]);
      const reused = [
        ...probes("y/a", "x/a", 80, ["tcp", "udp"], 40101),
        ...probes("y/b", "x/a", 80, ["tcp", "udp"], 40102),
      ];
      await expectAnswers(reused, "yes");
      const held = [new Held("y/a", "x/a", 6), new Held("y/b", "x/a", 4)];
      for (const h of held) await h.ready();
      for (const h of held) expect(await h.exchange()).toBe(true);

      setPolicies([denyAllX]);
      await expectAnswers(
        [...probes("y/a", "x/a", 80, ["tcp", "udp"]), ...probes("y/b", "x/a", 80, ["tcp", "udp"])],
        "no",
      );
      // The same 5-tuples as before: a new connection and new datagrams, all refused.
      expect(await observe(reused)).toEqual(expectation(reused, "no"));
      for (const h of held) expect(await h.exchange()).toBe(false);
      for (const h of held) h.close();
    },
    ceiling(120_000),
  );

  it(
    "gives a deleted pod's addresses to a pod of another namespace without its verdicts",
    async () => {
      // x's pods admit x only; x/d, on node-1 at chosen addresses, talks to x/c (its node) and x/b (across).
      setPolicies([
        policy("x", "from-x", {
          podSelector: {},
          ingress: [
            {
              from: [{ podSelector: {} }],
              ports: [
                { port: 80, protocol: "TCP" },
                { port: 80, protocol: "UDP" },
              ],
            },
          ],
        }),
      ]);
      const n1 = c.nodes[0] as PolicyNode;
      const fixed = {
        ranges: [
          [{ subnet: "10.40.1.0/24", rangeStart: "10.40.1.200", rangeEnd: "10.40.1.200" }],
          [{ subnet: "fd40:0:0:1::/64", rangeStart: "fd40:0:0:1::200", rangeEnd: "fd40:0:0:1::200" }],
        ],
      };
      await c.addPod("x/d", n1, { ipam: fixed });
      const used = (from: string) => [
        ...probes(from, "x/c", 80, ["tcp", "udp"], 40201),
        ...probes(from, "x/b", 80, ["tcp", "udp"], 40201),
      ];
      await expectAnswers(used("x/d"), "yes");

      c.deletePod("x/d");
      const next = await c.addPod("y/d", n1, { ipam: fixed });
      expect([next.v4, next.v6]).toEqual(["10.40.1.200", "fd40:0:0:1::200"]);
      // Fresh ports refused first: the agents know who holds the addresses now.
      await expectAnswers(
        [...probes("y/d", "x/c", 80, ["tcp", "udp"]), ...probes("y/d", "x/b", 80, ["tcp", "udp"])],
        "no",
      );
      // Then the 5-tuples x/d used: nothing of its verdicts answers for y/d.
      expect(await observe(used("y/d"))).toEqual(expectation(used("y/d"), "no"));
      c.deletePod("y/d");
    },
    ceiling(120_000),
  );

  it(
    "passes neighbour discovery only as neighbour discovery: no tunnel out of an isolated pod and into another",
    async () => {
      setPolicies([policy("x", "deny-both-ways", { podSelector: {}, policyTypes: ["Ingress", "Egress"] })]);
      await expectAnswers(probes("x/c", "x/a", 80), "no");
      const heard = new Map<string, string>();
      for (const key of ["x/a", "x/b"]) {
        const listener = spawn("nsenter", [`--net=/run/netns/${pod(key).netns}`, "python3", PROBE, "nd-listen"], {
          stdio: ["ignore", "pipe", "inherit"],
        });
        c.fx.processes.push({ kill: () => listener.kill("SIGKILL") });
        heard.set(key, "");
        listener.stdout?.on("data", (d: Buffer) => heard.set(key, (heard.get(key) ?? "") + d.toString()));
        await new Promise((r) => listener.stdout?.once("data", r));
      }
      const send = (from: string, to: string, payload: string) =>
        inNs(pod(from).netns, "python3", [PROBE, "nd-send", pod(to).v6, payload]);
      // Solicitations with a payload, hop limit 255, from x/c's global address: to x/a on
      // its node, to x/b across. Both pods isolated both ways.
      send("x/c", "x/a", "covert-local");
      send("x/c", "x/b", "covert-across");
      await new Promise((r) => setTimeout(r, 1500));
      expect(heard.get("x/a")).not.toContain("covert");
      expect(heard.get("x/b")).not.toContain("covert");
      // The control: without the policy the same packets arrive (the listeners hear them).
      setPolicies([]);
      await expectAnswers(probes("x/c", "x/a", 80), "yes");
      send("x/c", "x/a", "open-local");
      send("x/c", "x/b", "open-across");
      await new Promise((r) => setTimeout(r, 1500));
      expect(heard.get("x/a")).toContain("open-local");
      expect(heard.get("x/b")).toContain("open-across");
    },
    ceiling(120_000),
  );

  it(
    "denies the pods whose policy a full map cannot hold, reports them, and writes it once it fits",
    async () => {
      const n1 = c.nodes[0] as PolicyNode;
      const root = c.bpffsRootOf(n1.n);
      const status = () =>
        JSON.parse(
          inNs(n1.netns, BINARY, ["status", "--json", "--bpffs-root", root, "--state-dir", n1.agentNode.stateDir]),
        ).networkPolicy;
      // Junk of a slot no pod reads fills a map to the brim, as a node's many policies would.
      const fill = (name: "nkc_pol_ports" | "nkc_pol_peers") => {
        const map = BpfMap.openPinned(mapPin(root, name));
        const keys: Buffer[] = [];
        try {
          for (let i = 0; ; i++) {
            const key =
              name === "nkc_pol_ports"
                ? portKey(0xfffffff0, "ingress", i >= 65536 ? "UDP" : "TCP", i % 65536, 16)
                : peerKey(0xfffffff0, "ingress", { family: AF_INET6, bytes: junkAddress(i), length: 128 });
            try {
              map.update(key, ruleBits(1n));
            } catch (e) {
              if ((e as { code?: string }).code === "ENOSPC" || (e as { code?: string }).code === "E2BIG") break;
              throw e;
            }
            keys.push(key);
          }
        } catch (e) {
          map.close();
          throw e;
        }
        return () => {
          for (const k of keys) map.delete(k);
          map.close();
        };
      };

      for (const name of ["nkc_pol_ports", "nkc_pol_peers"] as const) {
        // y's pods reach x/a before; then a policy for x/a that needs room the map has not.
        await expectAnswers(probes("y/b", "x/a", 80), "yes");
        const release = fill(name);
        try {
          setPolicies([allowYIntoA]);
          // Denied whole (it would admit y on 80): not left open, not half-written.
          await expectAnswers([...probes("y/b", "x/a", 80), ...probes("y/a", "x/a", 80)], "no");
          await expectAnswers(probes("y/b", "x/c", 80), "yes"); // selected by nothing
          const s = status();
          expect(s.incomplete).toBe(1);
          expect(s.deniedWhole["x/a"]).toEqual([
            expect.objectContaining({ kind: "incomplete", direction: "ingress", policy: "x/allow-y" }),
          ]);
          expect(scrape(n1.agentNode, "/metrics")[1]).toMatch(
            /^netkit_cni_network_policy_pods_incomplete\{direction="ingress"\} 1$/m,
          );
          expect(n1.agent.log).toMatch(/network policy: pod x\/a: ingress: not written in full/);
        } finally {
          release();
        }
        // Room again: the agent's retry writes it whole.
        await expectAnswers(probes("y/b", "x/a", 80), "yes", ceiling(45_000));
        await expectAnswers(probes("y/b", "x/a", 81), "no");
        expect(status().incomplete).toBe(0);
        setPolicies([]);
      }
    },
    ceiling(240_000),
  );
});
