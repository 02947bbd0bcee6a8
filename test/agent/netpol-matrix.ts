/**
 * Probing a PolicyCluster as a truth table, the way upstream's netpol e2e tests (and
 * cyclonus) do: every pod probes its targets on each case (port, protocol, family), all
 * pods at once, and the matrix observed is compared with a model's, grid by grid. Shared
 * by the NetworkPolicy truth tables (netpol.test.ts) and ClusterNetworkPolicy's
 * (cluster-netpol.test.ts), which differ only in what they apply and which model judges.
 */
import {
  type Cluster,
  diffTables,
  type Endpoint,
  endpointName,
  allowed as modelAllows,
  type Probe,
  type Protocol,
  truthTable,
} from "../support/policy-model";
import { PORTS, type PodHere, type PolicyCluster } from "./netpol-cluster";

export interface MatrixCase {
  port: number;
  protocol: Protocol;
  family: 4 | 6;
}

export const casesOf = (protocols: Protocol[]): MatrixCase[] =>
  PORTS.flatMap((port) =>
    protocols.flatMap((protocol) => ([4, 6] as const).map((family) => ({ port, protocol, family }))),
  );

/** A target of one probe: an address, the end it stands for (a pod's key, "node:<name>"), a port and protocol. */
export interface MatrixTarget {
  ip: string;
  pod: string;
  port: number;
  protocol: Protocol;
}

/** A way of probing the cluster: what it observes, and how that differs from a model. */
export interface View {
  observe(): Promise<Set<string>>;
  differences(model: Cluster, seen: Set<string>): string;
}

/** The model's verdict on a probe: NetworkPolicy's (policy-model.ts) unless given. */
export type Judge = (model: Cluster, probe: Probe) => boolean;

export class PolicyMatrix {
  constructor(
    private readonly cluster: PolicyCluster,
    private readonly judge: Judge = modelAllows,
  ) {}

  private get pods(): Map<string, PodHere> {
    return this.cluster.pods;
  }

  /** Runs one probe process per source pod, all at once, on its targets; "from>to:port/PROTO/family" of each answered probe. */
  async probeAll(targetsOf: (from: string) => MatrixTarget[]): Promise<Set<string>> {
    const keys = [...this.pods.keys()];
    const seen = new Set<string>();
    const plans = keys.map(targetsOf);
    const runs = await Promise.all(
      keys.map((from, i) =>
        this.cluster.probeFrom(
          (this.pods.get(from) as PodHere).netns,
          (plans[i] ?? []).map((t) => `${t.ip} ${t.port} ${t.protocol.toLowerCase()}`),
        ),
      ),
    );
    keys.forEach((from, i) => {
      const lines = (runs[i] ?? "").trim().split("\n");
      (plans[i] ?? []).forEach((t, j) => {
        if (lines[j]?.endsWith(" yes"))
          seen.add(`${from}>${t.pod}:${t.port}/${t.protocol}/${t.ip.includes(":") ? 6 : 4}`);
      });
    });
    return seen;
  }

  /** The cases where the observed matrix differs from the model's, as grids; "" when none. */
  differencesOn(
    model: Cluster,
    seen: Set<string>,
    on: MatrixCase[],
    targets: Endpoint[],
    unprobed: (from: string, to: string) => boolean = () => false,
  ): string {
    const from = [...this.pods.keys()].map((pod) => ({ pod }));
    const to = targets;
    const out: string[] = [];
    for (const c of on) {
      const expected = truthTable(model, c, { from, to }, (probe) => this.judge(model, probe));
      const observed = truthTable(model, c, { from, to }, (probe) => {
        const f = "pod" in probe.from ? probe.from.pod : "";
        const t = endpointName(probe.to);
        if (unprobed(f, t)) return this.judge(model, probe);
        return seen.has(`${f}>${t}:${c.port}/${c.protocol}/${c.family}`);
      });
      const diff = diffTables(expected, observed);
      if (diff) out.push(`${c.protocol} ${c.port} IPv${c.family}:\n${diff}`);
    }
    return out.join("\n\n");
  }

  /** Every pod probes every pod at its addresses, on every one of `on`. */
  podView(on: MatrixCase[]): View {
    return {
      observe: () =>
        this.probeAll(() =>
          [...this.pods.values()].flatMap((dst) =>
            on.map((c) => ({ ip: c.family === 4 ? dst.v4 : dst.v6, pod: dst.key, port: c.port, protocol: c.protocol })),
          ),
        ),
      differences: (model, seen) =>
        this.differencesOn(
          model,
          seen,
          on,
          [...this.pods.keys()].map((pod) => ({ pod })),
        ),
    };
  }

  /** Every pod probes every node's addresses (a server of the node's own answers there), on every one of `on`. */
  nodeView(on: MatrixCase[]): View {
    const nodes = this.cluster.nodes.map((n) => ({ name: n.name, v4: `10.30.0.${n.n}`, v6: `fd30::${n.n}` }));
    return {
      observe: () =>
        this.probeAll(() =>
          nodes.flatMap((n) =>
            on.map((c) => ({
              ip: c.family === 4 ? n.v4 : n.v6,
              pod: endpointName({ node: n.name }),
              port: c.port,
              protocol: c.protocol,
            })),
          ),
        ),
      differences: (model, seen) =>
        this.differencesOn(
          model,
          seen,
          on,
          nodes.map((n) => ({ node: n.name })),
        ),
    };
  }

  /**
   * Observes until the cluster answers as `model` does, or `within` ms have passed: the
   * differences last seen ("" when none). The verdict is an observation begun after the
   * window: one begun before it may take longer than the window itself (a whole matrix
   * of probes in a guest), and would judge the cluster as it was before the change.
   */
  async settle(view: View, model: () => Cluster, within: number): Promise<string> {
    const end = Date.now() + within;
    for (;;) {
      const started = Date.now();
      const last = view.differences(model(), await view.observe());
      if (last === "" || started > end) return last;
    }
  }
}
