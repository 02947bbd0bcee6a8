/**
 * The oracle (test/support/policy-model.ts) and the compiler (src/agent/policy/model)
 * against the upstream netpol e2e scenarios (kubernetes test/e2e/network/netpol):
 * namespaces x, y, z with pods a, b, c each, every pod serving 80 and 81 on TCP, UDP and
 * SCTP under the e2e's port names; each expected table is the e2e's reachability (all
 * allowed, then the cells the policy denies), checked against both.
 */
import { describe, expect, it } from "vitest";
import { namespace, observedTable, pod, policy } from "../support/policy-cluster";
import {
  allowed,
  type Cluster,
  diffTables,
  type Endpoint,
  endpointName,
  type Protocol,
  podEndpoints,
  type RawPolicy,
  type TruthTable,
  tableText,
  truthTable,
} from "../support/policy-model";

const NAMESPACES = ["x", "y", "z"];
const PODS = ["a", "b", "c"];
const PORTS = [80, 81].flatMap((port) =>
  (["TCP", "UDP", "SCTP"] as const).map((protocol) => ({
    name: `serve-${port}-${protocol.toLowerCase()}`,
    port,
    protocol,
  })),
);

/** x/a is 10.0.1.1 and fd00::1:1, z/c 10.0.3.3; a and c on node n1, b on n2. */
const ipsOf = (n: number, p: number) => [`10.0.${n + 1}.${p + 1}`, `fd00::${n + 1}:${p + 1}`];

function cluster(...policies: RawPolicy[]): Cluster {
  return {
    namespaces: NAMESPACES.map((n) => namespace(n, { ns: n })),
    pods: NAMESPACES.flatMap((n, i) =>
      PODS.map((p, j) =>
        pod(`${n}/${p}`, { labels: { pod: p }, ips: ipsOf(i, j), node: p === "b" ? "n2" : "n1", ports: PORTS }),
      ),
    ),
    policies,
    nodes: [
      { name: "n1", ips: ["192.168.0.1"] },
      { name: "n2", ips: ["192.168.0.2"] },
    ],
  };
}

type Where = { ns?: string; pod?: string };
const at = (name: string, w: Where) => {
  const [ns, p] = name.split("/");
  return (w.ns === undefined || w.ns === ns) && (w.pod === undefined || w.pod === p);
};

/** The e2e's Reachability: everything allowed, then cells set; a pod always reaches itself. */
function reachability(c: Cluster, edits: [Where, Where, boolean][]): TruthTable {
  const names = podEndpoints(c).map(endpointName);
  const table: TruthTable = { from: names, to: names, allowed: names.map(() => names.map(() => true)) };
  for (const [from, to, value] of edits) {
    for (const [i, f] of names.entries()) {
      for (const [j, t] of names.entries()) if (at(f, from) && at(t, to)) (table.allowed[i] as boolean[])[j] = value;
    }
  }
  for (const i of names.keys()) (table.allowed[i] as boolean[])[i] = true;
  return table;
}

function check(c: Cluster, on: { port: number; protocol: Protocol; family?: 4 | 6 }, expected: TruthTable) {
  expect(diffTables(expected, truthTable(c, on)), "the model").toBe("");
  expect(diffTables(expected, observedTable(c, on)), "the compiled policies").toBe("");
}

const TCP80 = { port: 80, protocol: "TCP" } as const;
const X = { ns: "x" };
const ANY = {};

describe("the oracle and the compiler on the upstream scenarios", () => {
  it("default-deny-ingress: nothing reaches x, x reaches everyone", () => {
    const c = cluster(policy("x/deny-ingress", { podSelector: {}, policyTypes: ["Ingress"] }));
    check(c, TCP80, reachability(c, [[ANY, X, false]]));
    // Its own node still reaches x/a (n1), the other node does not.
    expect(allowed(c, { from: { node: "n1" }, to: { pod: "x/a" }, ...TCP80 })).toBe(true);
    expect(allowed(c, { from: { node: "n2" }, to: { pod: "x/a" }, ...TCP80 })).toBe(false);
  });

  it("default-deny-egress, and deny-all both ways", () => {
    const egress = cluster(policy("x/deny-egress", { podSelector: {}, policyTypes: ["Egress"] }));
    check(egress, TCP80, reachability(egress, [[X, ANY, false]]));
    const all = cluster(policy("x/deny-all", { podSelector: {}, policyTypes: ["Ingress", "Egress"] }));
    check(
      all,
      TCP80,
      reachability(all, [
        [X, ANY, false],
        [ANY, X, false],
      ]),
    );
  });

  it("allow-all ingress: a rule without from or ports isolates and allows everything", () => {
    const c = cluster(policy("x/allow-all", { podSelector: {}, ingress: [{}] }));
    check(c, { port: 81, protocol: "UDP" }, reachability(c, []));
  });

  it("allows ingress from a namespace by namespaceSelector (default namespace label)", () => {
    const c = cluster(
      policy("x/allow-y", {
        podSelector: { matchLabels: { pod: "a" } },
        ingress: [{ from: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "y" } } }] }],
      }),
    );
    check(
      c,
      TCP80,
      reachability(c, [
        [{ ns: "x" }, { ns: "x", pod: "a" }, false],
        [{ ns: "z" }, { ns: "x", pod: "a" }, false],
      ]),
    );
  });

  it("namespaceSelector and podSelector in one peer are ANDed", () => {
    const c = cluster(
      policy("x/and", {
        podSelector: { matchLabels: { pod: "a" } },
        ingress: [
          {
            from: [
              {
                namespaceSelector: { matchExpressions: [{ key: "ns", operator: "NotIn", values: ["x"] }] },
                podSelector: { matchLabels: { pod: "b" } },
              },
            ],
          },
        ],
      }),
    );
    check(
      c,
      TCP80,
      reachability(c, [
        [ANY, { ns: "x", pod: "a" }, false],
        [{ ns: "y", pod: "b" }, { ns: "x", pod: "a" }, true],
        [{ ns: "z", pod: "b" }, { ns: "x", pod: "a" }, true],
      ]),
    );
  });

  it("namespaceSelector and podSelector as two peers are ORed", () => {
    const c = cluster(
      policy("x/or", {
        podSelector: { matchLabels: { pod: "a" } },
        ingress: [
          {
            from: [
              { namespaceSelector: { matchExpressions: [{ key: "ns", operator: "NotIn", values: ["x"] }] } },
              { podSelector: { matchLabels: { pod: "b" } } },
            ],
          },
        ],
      }),
    );
    check(c, TCP80, reachability(c, [[{ ns: "x", pod: "c" }, { ns: "x", pod: "a" }, false]]));
  });

  it("matchExpressions In selects the peer pods", () => {
    const c = cluster(
      policy("x/expr", {
        podSelector: { matchLabels: { pod: "a" } },
        ingress: [{ from: [{ podSelector: { matchExpressions: [{ key: "pod", operator: "In", values: ["b"] }] } }] }],
      }),
    );
    check(
      c,
      TCP80,
      reachability(c, [
        [ANY, { ns: "x", pod: "a" }, false],
        [{ ns: "x", pod: "b" }, { ns: "x", pod: "a" }, true],
      ]),
    );
  });

  it("ingress on one named port: the target's serve-81-tcp open, 80 closed", () => {
    const c = cluster(policy("x/named", { podSelector: {}, ingress: [{ ports: [{ port: "serve-81-tcp" }] }] }));
    check(c, { port: 81, protocol: "TCP" }, reachability(c, []));
    check(c, TCP80, reachability(c, [[ANY, X, false]]));
    // The name is TCP's: UDP 81 stays closed.
    check(c, { port: 81, protocol: "UDP" }, reachability(c, [[ANY, X, false]]));
  });

  it("egress on one named port: resolved on each destination pod", () => {
    const c = cluster(
      policy("x/named-egress", {
        podSelector: {},
        policyTypes: ["Egress"],
        egress: [{ ports: [{ port: "serve-80-tcp" }] }],
      }),
    );
    check(c, TCP80, reachability(c, []));
    check(c, { port: 81, protocol: "TCP" }, reachability(c, [[X, ANY, false]]));
    // A name never matches an address that is no pod.
    const outside: Endpoint = { ip: "203.0.113.9" };
    expect(allowed(c, { from: { pod: "x/a" }, to: outside, ...TCP80 })).toBe(false);
    expect(observedTable(c, TCP80, { from: [{ pod: "x/a" }], to: [outside] }).allowed).toEqual([[false]]);
  });

  it("endPort: a range of ports to a namespace", () => {
    const c = cluster(
      policy("x/range", {
        podSelector: { matchLabels: { pod: "a" } },
        policyTypes: ["Egress"],
        egress: [{ to: [{ namespaceSelector: { matchLabels: { ns: "y" } } }], ports: [{ port: 80, endPort: 81 }] }],
      }),
    );
    const expected = reachability(c, [
      [{ ns: "x", pod: "a" }, ANY, false],
      [{ ns: "x", pod: "a" }, { ns: "y" }, true],
    ]);
    check(c, TCP80, expected);
    check(c, { port: 81, protocol: "TCP" }, expected);
    expect(allowed(c, { from: { pod: "x/a" }, to: { pod: "y/b" }, port: 82, protocol: "TCP" })).toBe(false);
  });

  it("egress to a server in a CIDR block, by the pod's host prefix", () => {
    const c = cluster(
      policy("x/cidr", {
        podSelector: { matchLabels: { pod: "a" } },
        policyTypes: ["Egress"],
        egress: [{ to: [{ ipBlock: { cidr: "10.0.2.2/32" } }] }],
      }),
    );
    check(
      c,
      TCP80,
      reachability(c, [
        [{ ns: "x", pod: "a" }, ANY, false],
        [{ ns: "x", pod: "a" }, { ns: "y", pod: "b" }, true],
      ]),
    );
  });

  it("ipBlock except: the CIDR around x/b but not x/b; a second policy allowing x/b wins (union)", () => {
    const except = policy("x/except", {
      podSelector: { matchLabels: { pod: "a" } },
      policyTypes: ["Egress"],
      egress: [{ to: [{ ipBlock: { cidr: "10.0.0.0/16", except: ["10.0.1.2/32"] } }] }],
    });
    const c = cluster(except);
    check(c, TCP80, reachability(c, [[{ ns: "x", pod: "a" }, { ns: "x", pod: "b" }, false]]));
    const both = cluster(
      except,
      policy("x/allow-b", {
        podSelector: { matchLabels: { pod: "a" } },
        policyTypes: ["Egress"],
        egress: [{ to: [{ ipBlock: { cidr: "10.0.1.2/32" } }] }],
      }),
    );
    check(both, TCP80, reachability(both, []));
  });

  it("ipBlock over IPv6 addresses of dual-stack pods", () => {
    const c = cluster(
      policy("x/v6", {
        podSelector: {},
        ingress: [{ from: [{ ipBlock: { cidr: "fd00::2:0/112", except: ["fd00::2:3/128"] } }] }],
      }),
    );
    const expected = reachability(c, [
      [ANY, X, false],
      [{ ns: "y" }, X, true],
      [{ ns: "y", pod: "c" }, X, false],
    ]);
    check(c, { ...TCP80, family: 6 }, expected);
    // Over IPv4 the same connections come from addresses the block does not hold.
    check(c, TCP80, reachability(c, [[ANY, X, false]]));
  });

  it("a protocol alone allows any port of it; SCTP is not TCP", () => {
    const tcp = cluster(
      policy("x/tcp", { podSelector: { matchLabels: { pod: "a" } }, ingress: [{ ports: [{ protocol: "TCP" }] }] }),
    );
    check(tcp, { port: 81, protocol: "TCP" }, reachability(tcp, []));
    check(tcp, { port: 80, protocol: "UDP" }, reachability(tcp, [[ANY, { ns: "x", pod: "a" }, false]]));
    const sctp = cluster(
      policy("x/sctp", {
        podSelector: { matchLabels: { pod: "a" } },
        ingress: [{ ports: [{ protocol: "SCTP", port: 80 }] }],
      }),
    );
    check(sctp, TCP80, reachability(sctp, [[ANY, { ns: "x", pod: "a" }, false]]));
    check(sctp, { port: 80, protocol: "SCTP" }, reachability(sctp, []));
  });

  it("stacked policies add up: port 81 from y, then port 80 from y too", () => {
    const from = [{ namespaceSelector: { matchLabels: { ns: "y" } } }];
    const p81 = policy("x/81", {
      podSelector: { matchLabels: { pod: "a" } },
      ingress: [{ from, ports: [{ port: 81 }] }],
    });
    const only81 = cluster(p81);
    const allowY = reachability(only81, [
      [ANY, { ns: "x", pod: "a" }, false],
      [{ ns: "y" }, { ns: "x", pod: "a" }, true],
    ]);
    check(only81, { port: 81, protocol: "TCP" }, allowY);
    check(only81, TCP80, reachability(only81, [[ANY, { ns: "x", pod: "a" }, false]]));
    const both = cluster(
      p81,
      policy("x/80", { podSelector: { matchLabels: { pod: "a" } }, ingress: [{ from, ports: [{ port: 80 }] }] }),
    );
    check(both, TCP80, allowY);
  });

  it("ingress and egress are isolated independently", () => {
    const c = cluster(
      policy("x/a-in", {
        podSelector: { matchLabels: { pod: "a" } },
        ingress: [{ from: [{ podSelector: { matchLabels: { pod: "b" } } }] }],
      }),
      policy("x/a-out", {
        podSelector: { matchLabels: { pod: "a" } },
        policyTypes: ["Egress"],
        egress: [{ to: [{ podSelector: { matchLabels: { pod: "c" } } }] }],
      }),
    );
    check(
      c,
      TCP80,
      reachability(c, [
        [ANY, { ns: "x", pod: "a" }, false],
        [{ ns: "x", pod: "b" }, { ns: "x", pod: "a" }, true],
        [{ ns: "x", pod: "a" }, ANY, false],
        [{ ns: "x", pod: "a" }, { ns: "x", pod: "c" }, true],
      ]),
    );
  });

  it("egress rules without policyTypes isolate egress too (the API's default)", () => {
    const c = cluster(
      policy("x/defaulted", { podSelector: { matchLabels: { pod: "a" } }, egress: [{ to: [{ podSelector: {} }] }] }),
    );
    check(
      c,
      TCP80,
      reachability(c, [
        [ANY, { ns: "x", pod: "a" }, false],
        [{ ns: "x", pod: "a" }, ANY, false],
        [{ ns: "x", pod: "a" }, { ns: "x" }, true],
      ]),
    );
  });

  it("an IP in both IPBlock.CIDR and IPBlock.Except, then the policy updated to that IP alone", () => {
    const to = (peers: Record<string, unknown>[]) => ({
      podSelector: { matchLabels: { pod: "a" } },
      policyTypes: ["Egress"],
      egress: [{ to: peers }],
    });
    const around = cluster(policy("x/cidr", to([{ ipBlock: { cidr: "0.0.0.0/4", except: ["10.0.1.2/32"] } }])));
    check(around, TCP80, reachability(around, [[{ ns: "x", pod: "a" }, { ns: "x", pod: "b" }, false]]));
    const updated = cluster(policy("x/cidr", to([{ ipBlock: { cidr: "10.0.1.2/32" } }])));
    check(
      updated,
      TCP80,
      reachability(updated, [
        [{ ns: "x", pod: "a" }, ANY, false],
        [{ ns: "x", pod: "a" }, { ns: "x", pod: "b" }, true],
      ]),
    );
  });

  it("an allow-all policy takes precedence over a narrower one, ingress and egress alike", () => {
    const TCP81 = { port: 81, protocol: "TCP" } as const;
    const in80 = policy("x/allow-ingress-port-80", {
      podSelector: {},
      policyTypes: ["Ingress"],
      ingress: [{ ports: [{ port: 80 }] }],
    });
    const out80 = policy("x/allow-egress-port-80", {
      podSelector: {},
      policyTypes: ["Egress"],
      egress: [{ ports: [{ port: 80 }] }],
    });
    const ingress = cluster(in80);
    check(ingress, TCP81, reachability(ingress, [[ANY, X, false]]));
    const egress = cluster(out80);
    check(egress, TCP81, reachability(egress, [[X, ANY, false]]));
    const allIn = cluster(
      in80,
      policy("x/allow-ingress", { podSelector: {}, policyTypes: ["Ingress"], ingress: [{}] }),
    );
    check(allIn, TCP81, reachability(allIn, []));
    const allOut = cluster(out80, policy("x/allow-egress", { podSelector: {}, policyTypes: ["Egress"], egress: [{}] }));
    check(allOut, TCP81, reachability(allOut, []));
  });

  it("NotIn on the default namespace label: x/a sends anywhere but y", () => {
    const c = cluster(
      policy("x/not-y", {
        podSelector: { matchLabels: { pod: "a" } },
        policyTypes: ["Egress"],
        egress: [
          {
            to: [
              {
                namespaceSelector: {
                  matchExpressions: [{ key: "kubernetes.io/metadata.name", operator: "NotIn", values: ["y"] }],
                },
              },
            ],
          },
        ],
      }),
    );
    check(c, TCP80, reachability(c, [[{ ns: "x", pod: "a" }, { ns: "y" }, false]]));
  });

  it("SCTP: default-deny-ingress; Ports; a pod of another namespace by both selectors", () => {
    const SCTP80 = { port: 80, protocol: "SCTP" } as const;
    const deny = cluster(policy("x/deny-all", { podSelector: {}, policyTypes: ["Ingress"], ingress: [] }));
    check(deny, SCTP80, reachability(deny, [[ANY, X, false]]));
    const ports = cluster(
      policy("x/allow-ingress-on-port-81-ns-x", {
        podSelector: { matchLabels: { pod: "a" } },
        policyTypes: ["Ingress"],
        ingress: [
          {
            from: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "y" } } }],
            ports: [{ port: 81, protocol: "SCTP" }],
          },
        ],
      }),
    );
    check(
      ports,
      { port: 81, protocol: "SCTP" },
      reachability(ports, [
        [X, { ns: "x", pod: "a" }, false],
        [{ ns: "z" }, { ns: "x", pod: "a" }, false],
      ]),
    );
    const both = cluster(
      policy("x/allow-ns-y-pod-a-via-namespace-pod-selector", {
        podSelector: { matchLabels: { pod: "a" } },
        policyTypes: ["Ingress"],
        ingress: [
          {
            from: [
              {
                namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "y" } },
                podSelector: { matchLabels: { pod: "a" } },
              },
            ],
          },
        ],
      }),
    );
    check(
      both,
      SCTP80,
      reachability(both, [
        [ANY, { ns: "x", pod: "a" }, false],
        [{ ns: "y", pod: "a" }, { ns: "x", pod: "a" }, true],
      ]),
    );
  });
});

describe("hostNetwork and finished pods", () => {
  it("a hostNetwork pod is not chosen by labels: its traffic is its node's", () => {
    const c = cluster(
      policy("x/from-h", {
        podSelector: { matchLabels: { pod: "a" } },
        ingress: [{ from: [{ namespaceSelector: {}, podSelector: { matchLabels: { pod: "h" } } }] }],
      }),
    );
    c.pods.push(pod("y/h", { labels: { pod: "h" }, ips: ["192.168.0.2"], node: "n2", hostNetwork: true }));
    c.pods.push(pod("y/h1", { labels: { pod: "h" }, ips: ["192.168.0.1"], node: "n1", hostNetwork: true }));
    const to = [{ pod: "x/a" }];
    // From n2 it is an outside address to x/a (on n1); from n1 it is x/a's own node.
    expect(truthTable(c, TCP80, { from: [{ pod: "y/h" }, { pod: "y/h1" }], to }).allowed).toEqual([[false], [true]]);
    expect(observedTable(c, TCP80, { from: [{ pod: "y/h" }, { pod: "y/h1" }], to }).allowed).toEqual([[false], [true]]);
  });

  it("a finished pod's address, now another pod's, is not allowed by the finished pod's labels", () => {
    const c = cluster(
      policy("x/from-done", {
        podSelector: { matchLabels: { pod: "a" } },
        ingress: [{ from: [{ podSelector: { matchLabels: { role: "job" } } }] }],
      }),
    );
    c.pods.push(pod("x/job", { labels: { role: "job" }, ips: ["10.0.9.9"], phase: "Succeeded" }));
    c.pods.push(pod("x/new", { labels: { role: "web" }, ips: ["10.0.9.9"] }));
    const probe = { from: { pod: "x/new" }, to: { pod: "x/a" }, ...TCP80 };
    expect(allowed(c, probe)).toBe(false);
    expect(observedTable(c, TCP80, { from: [probe.from], to: [probe.to] }).allowed).toEqual([[false]]);
  });
});

describe("policies the API server would refuse", () => {
  it("isolate what they select and allow nothing, in the model and compiled; readable ones still add", () => {
    const c = cluster(
      policy("x/icmp", { podSelector: { matchLabels: { pod: "a" } }, ingress: [{ ports: [{ protocol: "ICMP" }] }] }),
      policy("x/bad-except", {
        podSelector: {},
        policyTypes: ["Egress"],
        egress: [{ to: [{ ipBlock: { cidr: "10.0.0.0/16", except: ["10.1.0.0/24"] } }] }],
      }),
      // Readable, selecting x/a too: what it allows still gets in.
      policy("x/from-y", {
        podSelector: { matchLabels: { pod: "a" } },
        ingress: [{ from: [{ namespaceSelector: { matchLabels: { ns: "y" } } }] }],
      }),
    );
    check(
      c,
      TCP80,
      reachability(c, [
        [X, ANY, false], // x's egress: isolated by x/bad-except, nothing allowed
        [ANY, { ns: "x", pod: "a" }, false], // x/a's ingress: isolated by x/icmp and x/from-y...
        [{ ns: "y" }, { ns: "x", pod: "a" }, true], // ...which lets y in
      ]),
    );
  });

  it("with a podSelector that cannot be read, isolate the whole namespace", () => {
    const c = cluster(
      policy("y/bogus", {
        podSelector: { matchExpressions: [{ key: "pod", operator: "Bogus", values: ["a"] }] },
        policyTypes: ["Ingress"],
      }),
    );
    check(c, TCP80, reachability(c, [[ANY, { ns: "y" }, false]]));
  });
});

describe("truth tables", () => {
  it("print allowed and denied cells, and a diff names each disagreement", () => {
    const c = cluster(policy("x/deny", { podSelector: { matchLabels: { pod: "a" } }, policyTypes: ["Ingress"] }));
    const ends = { from: [{ pod: "x/b" }, { pod: "y/a" }], to: [{ pod: "x/a" }, { pod: "x/b" }] };
    const model = truthTable(c, TCP80, ends);
    expect(tableText(model)).toBe(["0=x/a  1=x/b", "     0 1", "x/b  X .", "y/a  X ."].join("\n"));
    const wrong: TruthTable = {
      ...model,
      allowed: [
        [true, true],
        [false, false],
      ],
    };
    expect(diffTables(model, wrong)).toBe(
      [
        "0=x/a  1=x/b",
        "     0 1",
        "x/b  + .",
        "y/a  X -",
        "(+ observed allowed, expected denied; - observed denied, expected allowed)",
        "x/b -> x/a: expected denied, observed allowed",
        "y/a -> x/b: expected allowed, observed denied",
      ].join("\n"),
    );
    expect(diffTables(model, model)).toBe("");
  });
});
