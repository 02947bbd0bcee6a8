/**
 * Random clusters, seeded: the compiled policies (src/agent/policy/model) against the
 * oracle (test/support/policy-model.ts) on every probe between their pods, outside
 * addresses and nodes; and the incremental index against the scanning snapshot through
 * random changes, with every pod whose compiled policy changed among those the change
 * named. A failure prints its seed and the differing tables.
 */
import type { V1Namespace, V1Pod } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { namespaceObject, networkPolicyObject, podObject } from "../../src/agent/policy/model/objects";
import { PolicyIndex } from "../../src/agent/policy/model/policy-index";
import { compileCluster, namespace, observedTable, pod, policy, snapshotOf } from "../support/policy-cluster";
import {
  type Cluster,
  diffTables,
  type Endpoint,
  type Protocol,
  podEndpoints,
  type RawPolicy,
  truthTable,
} from "../support/policy-model";

/** mulberry32: small, seeded, good enough to pick test cases. */
function random(seed: number) {
  let state = seed >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    chance: (p: number) => next() < p,
    int: (n: number) => Math.floor(next() * n),
    pick<T>(items: readonly T[]): T {
      return items[Math.floor(next() * items.length)] as T;
    },
  };
}
type Random = ReturnType<typeof random>;

const NAMESPACES = ["x", "y", "z"];
const KEYS = ["app", "tier"];
const VALUES = ["a", "b", "c"];
const PORT_CHOICES = [
  { name: "http", port: 80, protocol: "TCP" as const },
  { name: "http", port: 8080, protocol: "TCP" as const },
  { name: "dns", port: 53, protocol: "UDP" as const },
  { name: "sig", port: 9000, protocol: "SCTP" as const },
  { name: "alt", port: 81, protocol: "TCP" as const },
];

function labels(r: Random): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k of KEYS) if (r.chance(0.6)) out[k] = r.pick(VALUES);
  return out;
}

function selector(r: Random, keys = KEYS): Record<string, unknown> {
  const roll = r.int(5);
  if (roll === 0) return {};
  if (roll <= 2) return { matchLabels: { [r.pick(keys)]: r.pick(VALUES) } };
  const operator = r.pick(["In", "NotIn", "Exists", "DoesNotExist"]);
  const values = operator === "In" || operator === "NotIn" ? [r.pick(VALUES), r.pick(VALUES)] : undefined;
  return { matchExpressions: [{ key: r.pick(keys), operator, ...(values ? { values } : {}) }] };
}

function randomPod(r: Random, key: string, index: number): V1Pod {
  const node = r.pick(["n1", "n2"]);
  const hostNetwork = r.chance(0.08);
  const ips = hostNetwork
    ? [node === "n1" ? "192.168.0.1" : "192.168.0.2"]
    : [`10.0.${index % 3}.${index + 1}`, ...(r.chance(0.4) ? [`fd00::${index + 1}`] : [])];
  const ports = PORT_CHOICES.filter(() => r.chance(0.4)).filter(
    (p, i, all) => all.findIndex((q) => q.name === p.name) === i,
  );
  const phase = r.chance(0.08) ? "Succeeded" : "Running";
  return pod(key, { labels: labels(r), ips: r.chance(0.05) ? [] : ips, node, ports, hostNetwork, phase });
}

function peer(r: Random): Record<string, unknown> {
  switch (r.int(4)) {
    case 0:
      return { podSelector: selector(r) };
    case 1:
      return { namespaceSelector: selector(r, ["team"]) };
    case 2:
      return { namespaceSelector: selector(r, ["team"]), podSelector: selector(r) };
    default: {
      const cidr = r.pick([
        "10.0.0.0/16",
        "10.0.1.0/24",
        `10.0.${r.int(3)}.${r.int(12) + 1}/32`,
        "0.0.0.0/0",
        "fd00::/64",
      ]);
      const except =
        cidr === "10.0.0.0/16" && r.chance(0.5) ? [r.pick(["10.0.1.0/24", "10.0.2.0/30", "10.0.0.4/32"])] : [];
      return { ipBlock: { cidr, except } };
    }
  }
}

function portEntry(r: Random): Record<string, unknown> {
  const protocol = r.pick(["TCP", "TCP", "UDP", "SCTP"]);
  switch (r.int(4)) {
    case 0:
      return { protocol, port: r.pick([53, 80, 81, 8080, 9000]) };
    case 1:
      return { protocol, port: 80, endPort: r.pick([81, 8080]) };
    case 2:
      return { protocol, port: r.pick(["http", "dns", "sig", "alt"]) };
    default:
      return { protocol };
  }
}

function rules(r: Random, peersField: "from" | "to"): Record<string, unknown>[] {
  return Array.from({ length: r.int(3) }, () => {
    const rule: Record<string, unknown> = {};
    if (r.chance(0.7)) rule[peersField] = Array.from({ length: r.int(3) }, () => peer(r));
    if (r.chance(0.6)) rule.ports = Array.from({ length: r.int(2) + 1 }, () => portEntry(r));
    return rule;
  });
}

function randomPolicy(r: Random, key: string): RawPolicy {
  const spec: Record<string, unknown> = { podSelector: selector(r) };
  const types = r.pick([undefined, ["Ingress"], ["Egress"], ["Ingress", "Egress"]]);
  if (types) spec.policyTypes = types;
  if (r.chance(0.8)) spec.ingress = rules(r, "from");
  if (r.chance(0.6)) spec.egress = rules(r, "to");
  // Now and then one the API server would refuse: in both readings it isolates what it
  // selects and allows nothing.
  if (r.chance(0.05)) spec.ingress = [{ ports: [{ protocol: "ICMP" }] }];
  return policy(key, spec);
}

function randomNamespace(r: Random, name: string): V1Namespace {
  return namespace(name, r.chance(0.7) ? { team: r.pick(VALUES) } : {});
}

function randomCluster(seed: number): Cluster {
  const r = random(seed);
  return {
    namespaces: NAMESPACES.map((n) => randomNamespace(r, n)),
    pods: Array.from({ length: 9 + r.int(5) }, (_, i) => randomPod(r, `${r.pick(NAMESPACES)}/p${i}`, i)),
    policies: Array.from({ length: 1 + r.int(5) }, (_, i) => randomPolicy(r, `${r.pick(NAMESPACES)}/np${i}`)),
    nodes: [
      { name: "n1", ips: ["192.168.0.1"] },
      { name: "n2", ips: ["192.168.0.2"] },
    ],
  };
}

const PROBED: { port: number; protocol: Protocol }[] = [53, 80, 81, 8080, 9000, 12345].flatMap((port) =>
  (["TCP", "UDP", "SCTP"] as const).map((protocol) => ({ port, protocol })),
);

describe("compiled policies against the oracle, on random clusters", () => {
  it("agree on every probe: pods, outside addresses and nodes, both families, every port and protocol", () => {
    for (let seed = 1; seed <= 150; seed++) {
      const c = randomCluster(seed);
      const compiled = compileCluster(c);
      const outside: Endpoint[] = [{ ip: "203.0.113.5" }, { ip: "10.0.1.200" }, { node: "n1" }, { node: "n2" }];
      const ends = { from: [...podEndpoints(c), ...outside], to: [...podEndpoints(c), { ip: "203.0.113.5" }] };
      const v6 = { from: [...podEndpoints(c), { ip: "fd00::99" }], to: [...podEndpoints(c), { ip: "fd00::99" }] };
      for (const on of PROBED) {
        for (const [family, endpoints] of [[4, ends] as const, [6, v6] as const]) {
          const model = truthTable(c, { ...on, family }, endpoints);
          const diff = diffTables(model, observedTable(c, { ...on, family }, endpoints, compiled));
          if (diff !== "") {
            expect.fail(
              `seed ${seed}, ${on.protocol}/${on.port} IPv${family}\n${diff}\n${JSON.stringify(c.policies, null, 1)}`,
            );
          }
        }
      }
      const snapshot = snapshotOf(c);
      const bounded = snapshot.pods.flatMap((p) =>
        snapshot.compile(p).problems.filter((q) => q.kind.endsWith("bound")),
      );
      expect(bounded, `seed ${seed}: random clusters stay within the datapath's bounds`).toEqual([]);
    }
  }, 60_000);
});

// ---- the index through random changes --------------------------------------------------

type Change =
  | { kind: "pod"; key: string; object: V1Pod | undefined }
  | { kind: "namespace"; key: string; object: V1Namespace | undefined }
  | { kind: "policy"; key: string; object: RawPolicy | undefined };

function randomChange(r: Random, c: Cluster, step: number): Change {
  const roll = r.int(10);
  if (roll < 5) {
    const existing = c.pods.length > 0 && r.chance(0.7) ? r.pick(c.pods) : undefined;
    const key = existing
      ? `${existing.metadata?.namespace}/${existing.metadata?.name}`
      : `${r.pick(NAMESPACES)}/q${step}`;
    return { kind: "pod", key, object: existing && r.chance(0.2) ? undefined : randomPod(r, key, 20 + (step % 200)) };
  }
  if (roll < 7) {
    const name = r.pick([...NAMESPACES, "w"]);
    return { kind: "namespace", key: name, object: r.chance(0.15) ? undefined : randomNamespace(r, name) };
  }
  const existing = c.policies.length > 0 && r.chance(0.6) ? r.pick(c.policies) : undefined;
  const key = existing
    ? `${existing.metadata.namespace}/${existing.metadata.name}`
    : `${r.pick(NAMESPACES)}/np-${step}`;
  return { kind: "policy", key, object: existing && r.chance(0.3) ? undefined : randomPolicy(r, key) };
}

/** The change applied to the raw cluster (for the snapshot) and to the index; the index's answer. */
function apply(c: Cluster, index: PolicyIndex, change: Change): Set<string> {
  const keyOf = (o: { metadata?: { namespace?: string; name?: string } }) =>
    o.metadata?.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : (o.metadata?.name ?? "");
  const replace = <T extends { metadata?: { namespace?: string; name?: string } }>(
    list: T[],
    object: T | undefined,
  ) => {
    const kept = list.filter((o) => keyOf(o) !== change.key);
    return object ? [...kept, object] : kept;
  };
  switch (change.kind) {
    case "pod":
      c.pods = replace(c.pods, change.object);
      return index.podChanged(change.key, undefined, change.object && podObject(change.object)?.object);
    case "namespace":
      c.namespaces = replace(c.namespaces, change.object);
      return index.namespaceChanged(change.key, undefined, change.object && namespaceObject(change.object)?.object);
    case "policy":
      c.policies = replace(c.policies, change.object);
      return index.policyChanged(change.key, undefined, change.object && networkPolicyObject(change.object)?.object);
  }
}

/** Every local target's compiled result, as the snapshot gives it. */
function expectedResults(c: Cluster): Map<string, string> {
  const snapshot = snapshotOf(c);
  const out = new Map<string, string>();
  for (const p of snapshot.pods) {
    if (p.nodeName === "n1" && !p.hostNetwork && !p.terminal) {
      out.set(`${p.namespace}/${p.name}`, JSON.stringify(snapshot.compile(p)));
    }
  }
  return out;
}

describe("the incremental index against the snapshot, through random changes", () => {
  it("compiles every local pod as the snapshot does, and names every pod whose result changed", () => {
    for (let seed = 1; seed <= 40; seed++) {
      const r = random(1000 + seed);
      const c = randomCluster(seed);
      const index = new PolicyIndex("n1");
      const defined = <T>(v: T | undefined): v is T => v !== undefined;
      index.reset(
        c.pods.map((p) => podObject(p)?.object).filter(defined),
        c.namespaces.map((n) => namespaceObject(n)?.object).filter(defined),
        c.policies.map((p) => networkPolicyObject(p)?.object).filter(defined),
      );
      let before = expectedResults(c);
      for (let step = 0; step < 60; step++) {
        const change = randomChange(r, c, step);
        const named = apply(c, index, change);
        const now = expectedResults(c);
        const where = `seed ${seed} step ${step}: ${change.kind} ${change.key}`;
        expect(new Set(index.localTargets()), where).toEqual(new Set(now.keys()));
        for (const [key, result] of now) {
          expect(JSON.stringify(index.compile(key)), `${where}: ${key}`).toBe(result);
          if (before.get(key) !== result) expect(named.has(key), `${where}: ${key} changed unnamed`).toBe(true);
        }
        for (const key of before.keys())
          if (!now.has(key)) expect(named.has(key), `${where}: ${key} went unnamed`).toBe(true);
        before = now;
      }
    }
  });
});
