/**
 * The agent's controllers alone (each concern's controller.ts under src/agent, and
 * conflist.ts), each with fake informers and a fake of what it writes: what each makes of
 * a complete list, and that one event costs work for its own key only (no dump of the
 * kernel's table, no write for another node's routes or another Service's entries).
 */
import { describe, expect, it } from "vitest";
import { ConflistController } from "../../src/agent/conflist";
import type { NodeFacts } from "../../src/agent/kube/node-facts";
import { nodeObject, serviceObject, sliceObject } from "../../src/agent/kube/objects";
import { WorkQueue } from "../../src/agent/kube/workqueue";
import { MasqueradeController } from "../../src/agent/masquerade/controller";
import type { AgentOptions } from "../../src/agent/options";
import { RoutesController } from "../../src/agent/routes/controller";
import type { RouteTable, RouteTableView } from "../../src/agent/routes/table";
import { ServicesController, type ServiceTables, type Withdrawn } from "../../src/agent/services/controller";
import type { ServiceObject, SliceObject } from "../../src/agent/services/plan";
import type { SvcMaps } from "../../src/bpf/svc/objects";
import type { TableMap } from "../../src/bpf/svc/table";
import { parseSubnet } from "../../src/cni/address";
import type { InstallOptions } from "../../src/install/options";
import type { Route } from "../../src/netlink/routes";
import { FakeInformer } from "../support/fake-informer";

const node = (name: string, podCIDRs: string[], ip: string): NodeFacts => {
  const t = nodeObject({
    metadata: { name },
    spec: { podCIDRs },
    status: { addresses: [{ type: "InternalIP", address: ip }] },
  });
  if (!t) throw new Error(name);
  return t.object;
};

function queue() {
  const failed: string[] = [];
  return { q: new WorkQueue({ failed: (k, n, e) => failed.push(`${k} ${n}: ${e.message}`) }), failed };
}

/** A route table that records what is asked of it. */
class FakeRoutes implements RouteTable {
  readonly routes = new Map<string, Route>();
  readonly theirs = new Set<string>();
  calls: string[] = [];
  async read(): Promise<RouteTableView> {
    this.calls.push("read");
    const s = parseSubnet("10.30.0.0/24");
    if (!s.ok) throw new Error("subnet");
    return {
      ours: [...this.routes.values()],
      theirs: new Set(this.theirs),
      connected: [{ subnet: s.subnet, ifindex: 2 }],
    };
  }
  async create(r: Route): Promise<boolean> {
    this.calls.push(`create ${r.dst} ${r.gateway}`);
    if (this.theirs.has(r.dst) || this.routes.has(r.dst)) return false;
    this.routes.set(r.dst, r);
    return true;
  }
  async replace(r: Route): Promise<void> {
    this.calls.push(`replace ${r.dst} ${r.gateway}`);
    this.routes.set(r.dst, r);
  }
  async remove(r: Route): Promise<boolean> {
    this.calls.push(`remove ${r.dst}`);
    return this.routes.delete(r.dst);
  }
  text(): string[] {
    return [...this.routes.values()].map((r) => `${r.dst} via ${r.gateway}`).sort();
  }
}

function routesSetup() {
  const { q, failed } = queue();
  const nodes = new FakeInformer<NodeFacts>((n) => n.name);
  const table = new FakeRoutes();
  let fullSyncs = 0;
  const routes = new RoutesController(q, nodes, table, "self", ["10.40.0.0/16"], {
    peers: () => {},
    fullSync: () => fullSyncs++,
  });
  return { q, failed, nodes, table, routes, fullSyncs: () => fullSyncs };
}

describe("the route controller", () => {
  it("routes every other node after the first list, then syncs only the node an event names", async () => {
    const { q, nodes, table, routes, fullSyncs } = routesSetup();
    const peers = Array.from({ length: 50 }, (_, i) => node(`n${i + 2}`, [`10.40.${i + 2}.0/24`], `10.30.0.${i + 2}`));
    nodes.list([node("self", ["10.40.1.0/24"], "10.30.0.1"), ...peers]);
    await q.idle();
    expect(table.routes.size).toBe(50);
    expect(routes.synced).toBe(true);
    expect(fullSyncs()).toBe(1);

    table.calls = [];
    nodes.put(node("n7", ["10.40.7.0/24"], "10.30.0.77")); // moved
    nodes.remove("n8");
    nodes.put(node("n99", ["10.40.99.0/24"], "10.30.0.99"));
    await q.idle();
    // No dump of the table, and nothing for the other 48 nodes.
    expect(table.calls).toEqual([
      "replace 10.40.7.0/24 10.30.0.77",
      "remove 10.40.8.0/24",
      "create 10.40.99.0/24 10.30.0.99",
    ]);
    expect(routes.status.routes).toBe(50);
  });

  it("re-judges the nodes whose ranges a change overlaps, both ways", async () => {
    const { q, nodes, table, routes } = routesSetup();
    nodes.list([
      node("self", ["10.40.1.0/24"], "10.30.0.1"),
      node("a", ["10.40.2.0/24"], "10.30.0.2"),
      node("b", ["10.40.3.0/24"], "10.30.0.3"),
    ]);
    await q.idle();
    table.calls = [];
    nodes.put(node("b", ["10.40.2.0/24"], "10.30.0.3")); // b claims a's range
    await q.idle();
    expect(table.text()).toEqual([]);
    const state = () => Object.fromEntries(routes.status.peers.map((p) => [p.node, p.state]));
    expect(state()).toEqual({ a: "conflict", b: "conflict" });
    nodes.put(node("b", ["10.40.3.0/24"], "10.30.0.3")); // and gives it back
    await q.idle();
    expect(table.text()).toEqual(["10.40.2.0/24 via 10.30.0.2", "10.40.3.0/24 via 10.30.0.3"]);
    expect(state()).toEqual({ a: "routed", b: "routed" });
    expect(table.calls).not.toContain("read");
  });

  it("never replaces someone else's route, reports it, and repairs its own at the full sync", async () => {
    const { q, nodes, table, routes } = routesSetup();
    table.theirs.add("10.40.2.0/24");
    nodes.list([node("self", ["10.40.1.0/24"], "10.30.0.1"), node("a", ["10.40.2.0/24"], "10.30.0.2")]);
    await q.idle();
    expect(table.routes.size).toBe(0);
    expect(routes.status.peers[0]).toMatchObject({ node: "a", state: "conflict" });
    // A route appears meanwhile for a new node's range: the create fails, nothing is replaced.
    table.calls = [];
    table.routes.set("10.40.3.0/24", { family: 2, dst: "10.40.3.0/24", gateway: "10.30.0.66", ifindex: 2 });
    nodes.put(node("c", ["10.40.3.0/24"], "10.30.0.3"));
    await q.idle();
    expect(table.calls).toEqual(["create 10.40.3.0/24 10.30.0.3"]);
    expect(routes.status.peers.find((p) => p.node === "c")?.state).toBe("conflict");
    // Our route deleted by hand, someone's gone: the resync puts things right.
    table.theirs.clear();
    routes.resync();
    await q.idle();
    expect(table.text()).toEqual(["10.40.2.0/24 via 10.30.0.2", "10.40.3.0/24 via 10.30.0.3"]);
  });

  it("syncs everything when this node's own CIDRs change, and nothing before it has them", async () => {
    const { q, nodes, table, routes } = routesSetup();
    nodes.list([node("self", [], "10.30.0.1"), node("a", ["10.40.2.0/24"], "10.30.0.2")]);
    await q.idle();
    expect(table.routes.size).toBe(0);
    expect(routes.synced).toBe(false);
    nodes.put(node("self", ["10.40.1.0/24"], "10.30.0.1"));
    await q.idle();
    expect(table.text()).toEqual(["10.40.2.0/24 via 10.30.0.2"]);
    expect(routes.synced).toBe(true);
    nodes.put(node("self", ["10.40.2.0/24"], "10.30.0.1")); // now overlapping a's
    await q.idle();
    expect(table.text()).toEqual([]);
  });
});

describe("the conflist controller", () => {
  const opts = {
    nodeName: "self",
    clusterCidrs: ["10.40.0.0/16"],
    installArgs: [],
    installBinary: false,
    stateDir: "/nonexistent-agent-state",
    serviceTranslation: false,
  } as unknown as AgentOptions;

  it("waits for this node's CIDRs, writes the conflist once per change, reports a CIDR outside the cluster", async () => {
    const { q } = queue();
    const nodes = new FakeInformer<NodeFacts>((n) => n.name);
    const written: string[][] = [];
    const install = (o: InstallOptions) => {
      written.push(o.generate.podCidrs ?? []);
      return { binary: { action: "skipped" }, conflist: { path: "/x", action: "installed" }, warnings: [] } as never;
    };
    const conflist = new ConflistController(q, nodes, { synced: false, routeCount: 0 }, opts, install, () => {});
    nodes.list([node("self", [], "10.30.0.1"), node("a", ["10.40.2.0/24"], "10.30.0.2")]);
    await q.idle();
    expect(conflist.status.waiting).toBe("node self has no spec.podCIDRs yet");
    nodes.put(node("a", ["10.40.22.0/24"], "10.30.0.2")); // another node: nothing to do
    nodes.put(node("self", ["10.40.1.0/24", "10.50.1.0/24"], "10.30.0.1"));
    await q.idle();
    expect(written).toEqual([["10.40.1.0/24", "10.50.1.0/24"]]);
    expect(conflist.status.problems).toEqual([
      expect.stringContaining("this node's pod CIDR 10.50.1.0/24 lies outside the cluster CIDRs"),
    ]);
    expect(conflist.status.synced).toBe(false); // the routes are not synced
  });
});

describe("the masquerade controller", () => {
  it("writes the table when its text changes or it went missing, and removes it when off", async () => {
    const { q } = queue();
    let current: string | undefined;
    const applied: string[] = [];
    const table = {
      current: () => current,
      apply: (r: string) => {
        applied.push(r);
        current = r;
      },
      remove: () => {
        current = undefined;
      },
    };
    const opts = { masquerade: true, clusterCidrs: ["10.40.0.0/16"], noMasqueradeCidrs: [] };
    const m = new MasqueradeController(q, opts, table, (c) => `rules ${c.join()}`, "t");
    m.resync();
    await q.idle();
    m.resync();
    await q.idle();
    expect(applied).toEqual(["rules 10.40.0.0/16"]);
    current = undefined; // someone flushed it
    m.resync();
    await q.idle();
    expect(applied).toHaveLength(2);
    current = "left by an earlier agent";
    const off = new MasqueradeController(queue().q, { ...opts, masquerade: false }, table, () => "", "t");
    expect(off.state).toBe("off");
  });
});

/** A map the Service table writer uses, counting writes. */
class CountingMap implements TableMap {
  readonly entries = new Map<string, Buffer>();
  writes = 0;
  lookup(key: Buffer) {
    return this.entries.get(key.toString("hex"));
  }
  update(key: Buffer, value: Buffer) {
    this.writes++;
    this.entries.set(key.toString("hex"), Buffer.from(value));
  }
  delete(key: Buffer) {
    this.writes++;
    return this.entries.delete(key.toString("hex"));
  }
  *keys() {
    for (const k of [...this.entries.keys()]) yield Buffer.from(k, "hex");
  }
}

const svc = (name: string, ip: string) => {
  const t = serviceObject({
    metadata: { namespace: "ns", name },
    spec: { clusterIP: ip, clusterIPs: [ip], ports: [{ name: "http", port: 80, protocol: "TCP" }] },
  });
  if (!t) throw new Error(name);
  return t.object;
};
const slice = (name: string, service: string, ips: string[]) => {
  const t = sliceObject({
    metadata: { namespace: "ns", name, labels: { "kubernetes.io/service-name": service } },
    addressType: "IPv4",
    ports: [{ name: "http", port: 8080, protocol: "TCP" }],
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true } })),
  });
  if (!t) throw new Error(name);
  return t.object;
};
const keyOf = (o: { metadata?: { namespace?: string; name?: string } }) =>
  `${o.metadata?.namespace}/${o.metadata?.name}`;

describe("the Service controller", () => {
  function setup() {
    const { q, failed } = queue();
    const services = new FakeInformer<ServiceObject>(keyOf);
    const slices = new FakeInformer<SliceObject>(keyOf);
    const maps = { services: new CountingMap(), slots: new CountingMap(), backends: new CountingMap() };
    const withdrawn: Withdrawn[] = [];
    const tables: ServiceTables = {
      open: () => ({ ...maps, close: () => {} }) as unknown as SvcMaps & { close(): void },
      closeWithdrawn: (_maps, w) => {
        withdrawn.push(...w);
        return w.reduce((n, x) => n + x.backends.length, 0);
      },
    };
    const controller = new ServicesController(q, services, slices, "self", "/nonexistent-bpffs", tables);
    const writes = () => maps.services.writes + maps.slots.writes + maps.backends.writes;
    return { q, failed, services, slices, controller, maps, withdrawn, writes };
  }

  it("writes nothing before both kinds are listed, then every Service", async () => {
    const { q, services, slices, controller, writes } = setup();
    services.list(Array.from({ length: 20 }, (_, i) => svc(`s${i}`, `10.96.0.${i + 1}`)));
    await q.idle();
    expect(writes()).toBe(0);
    slices.list(Array.from({ length: 20 }, (_, i) => slice(`s${i}-a`, `s${i}`, [`10.40.1.${i + 1}`])));
    await q.idle();
    expect(controller.status).toMatchObject({ synced: true, services: 20, backends: 20 });
  });

  it("rewrites one Service's entries for its slice's change, closes its withdrawn backend's sockets, and nothing else", async () => {
    const { q, services, slices, controller, writes, withdrawn } = setup();
    services.list(Array.from({ length: 20 }, (_, i) => svc(`s${i}`, `10.96.0.${i + 1}`)));
    slices.list(Array.from({ length: 20 }, (_, i) => slice(`s${i}-a`, `s${i}`, [`10.40.1.${i + 1}`, "10.40.9.9"])));
    await q.idle();
    const before = writes();
    slices.put(slice("s3-a", "s3", ["10.40.1.4"])); // 10.40.9.9 withdrawn from s3 only
    await q.idle();
    // One backend and its slot go; the count shrinks: a handful of writes, not 20 Services' worth.
    expect(writes() - before).toBeLessThanOrEqual(3);
    expect(withdrawn).toEqual([
      { frontend: { ip: "10.96.0.4", port: 80, protocol: "TCP" }, backends: [{ ip: "10.40.9.9", port: 8080 }] },
    ]);
    expect(controller.status).toMatchObject({ services: 20, backends: 39, closedSockets: 1 });

    // The Service goes: its entry, with its last backend.
    services.remove("ns/s3");
    await q.idle();
    expect(controller.status).toMatchObject({ services: 19, backends: 38 });
    expect(withdrawn.at(-1)).toEqual({
      frontend: { ip: "10.96.0.4", port: 80, protocol: "TCP" },
      backends: [{ ip: "10.40.1.4", port: 8080 }],
    });
  });

  it("keeps a ClusterIP another Service took over when the first one's deletion syncs after", async () => {
    const { q, services, slices, controller } = setup();
    services.list([svc("old", "10.96.0.7")]);
    slices.list([slice("old-a", "old", ["10.40.1.1"]), slice("new-a", "new", ["10.40.1.2"])]);
    await q.idle();
    services.put(svc("new", "10.96.0.7"));
    services.remove("ns/old");
    await q.idle();
    expect(controller.status).toMatchObject({ services: 1, backends: 1 });
    // What the tables hold for the front end is the new Service's backend.
    controller.resync();
    await q.idle();
    expect(controller.status).toMatchObject({ services: 1, backends: 1 });
  });
});
