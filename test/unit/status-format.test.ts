import { describe, expect, it } from "vitest";
import type { NodeStatus } from "../../src/cli/status";
import { formatStatus } from "../../src/cli/status-format";

/** A node with two pods, one of them flooding its flow table; no socket bypass. */
const facts = (): NodeStatus => ({
  kernel: { release: "6.12.0-test", netkit: true, tcx: true, bpffsMounted: true },
  autoDatapath: "netkit",
  bpffsRoot: "/sys/fs/bpf/netkit-cni",
  initialized: true,
  programs: {
    build: "1700000000-0123456789abcdef",
    pinnedBuilds: ["1700000000-0123456789abcdef-conntrack"],
    running: "1700000000-0123456789abcdef",
    ids: { nkc_from_pod: 11, nkc_src_check: 12, nkc_host_in: 13, nkc_pod_ingress: 14 },
    natCheck: "conntrack",
    conntrackUnavailable: undefined,
  },
  flowTables: {
    tables: 2,
    capacityEach: 1024,
    entries: 1000,
    remembered: 66000,
    forgotten: 10,
    evicted: 64990,
    fullest: {
      device: "nk0123abcd",
      ifindex: 7,
      containerId: "0123456789abcdef0123",
      ifname: "eth0",
      entries: 1000,
      capacity: 1024,
      evicted: 64990,
    },
  },
  maps: [
    { name: "nkc_endpoints", kind: "hash", entries: 2, capacity: 16384 },
    { name: "nkc_cluster", kind: "lpm_trie", entries: 1, capacity: 64 },
    { name: "nkc_counters", kind: "percpu_hash", entries: 2, capacity: 16384 },
    { name: "nkc_flow_tables", kind: "array_of_maps", entries: 16, capacity: 16384 },
    { name: "nkc_flow_owner", kind: "hash", entries: 2, capacity: 16384 },
  ],
  uplinks: [{ pin: "uplink/eth0/ingress", linkId: 3, programId: 13, ifindex: 2, device: "eth0" }],
  sockBypass: {
    links: [],
    sockets: 0,
    bound: 4096,
    refusedBound: 0,
    refusedNetns: 0,
    unavailable: undefined,
    off: undefined,
  },
  networkPolicy: undefined,
  encryption: undefined,
  serviceTranslation: {
    links: 0,
    pods: 0,
    services: 0,
    backends: 0,
    counters: undefined,
    podState: undefined,
    socketClosing: undefined,
  },
  bandwidth: { limited: 0, modes: {}, pacingOff: [], ingressModes: {}, ingressPacingOff: undefined },
  drops: {
    pods: { spoofed: 3, tagged: 1, ethertype: 0, unparsable: 0, limit: 0, rewrite: 0, policy: 4 },
    uplinks: [
      {
        device: "eth0",
        drops: { spoofed: 0, tagged: 0, ethertype: 0, unparsable: 0, limit: 0, rewrite: 0, policy: 0 },
      },
    ],
  },
  sharedSubnets: [],
  endpoints: { devices: 2, retired: 0, pinned: 2, filtered: 0, addresses: 2, links: [] },
  problems: [],
});

describe("formatStatus", () => {
  it("renders every subject on its own line, the maps as a table", () => {
    expect(formatStatus(facts()).split("\n")).toEqual([
      "kernel          6.12.0-test: netkit yes, tcx yes, bpffs mounted",
      "datapath auto   netkit",
      "bpffs root      /sys/fs/bpf/netkit-cni",
      "programs        build 1700000000-0123456789abcdef: nkc_from_pod=11 nkc_src_check=12 nkc_host_in=13 nkc_pod_ingress=14",
      "NAT check       conntrack",
      "flow tables     2 of 1024 entries each: 1000 held, 66000 remembered, 10 forgotten, 64990 evicted",
      "fullest table   nk0123abcd (container 0123456789ab/eth0): 1000/1024 entries, 64990 evicted",
      "maps            NAME             KIND           ENTRIES  CAPACITY",
      "                nkc_endpoints    hash                 2     16384",
      "                nkc_cluster      lpm_trie             1        64",
      "                nkc_counters     percpu_hash          2     16384",
      "                nkc_flow_tables  array_of_maps       16     16384",
      "                nkc_flow_owner   hash                 2     16384",
      "                a full non-LRU map evicts nothing (inserts fail); the LRU flow tables evict their oldest",
      "uplink link     uplink/eth0/ingress: link 3, program 13, on eth0",
      `socket bypass   off (no pod of a network with "sockBypass": true yet)`,
      `services        not translated (no pod of a network with "serviceTranslation": true yet)`,
      `network policy  not enforced (no pod of a network with "networkPolicy": true yet)`,
      "encryption      off (no WireGuard device: the agent runs without --encryption)",
      "rate limits     0 pods",
      "refused         by pods: spoofed:3,tagged:1,policy:4",
      "refused         from the wire on eth0: none",
      "endpoints       2 devices, 2 with programs, 2 addresses in the endpoint map",
      "problems        none",
    ]);
  });

  it("counts device pairs a deferred DEL retired, only when there are some", () => {
    const s = facts();
    s.endpoints.retired = 3;
    expect(formatStatus(s).split("\n")).toContain(
      "retired         3 device pairs DEL'd, waiting for their netns's teardown, the agent or GC",
    );
  });

  it("counts limited pods by mode per direction, and says why a direction is not paced", () => {
    const s = facts();
    s.bandwidth = {
      limited: 3,
      modes: { police: 2 },
      pacingOff: [{ uplink: "eth0", reason: "cannot attach fq to eth0: Specified qdisc kind is unknown." }],
      ingressModes: { qdisc: 1, police: 1 },
      ingressPacingOff: "shaped by tbf: no fq (Specified qdisc kind is unknown.)",
    };
    const lines = formatStatus(s).split("\n");
    const from = lines.indexOf("rate limits     3 pods");
    expect(lines.slice(from, from + 5)).toEqual([
      "rate limits     3 pods",
      "  egress        2 policed (token bucket in the programs)",
      "  ingress       1 shaped (tbf on its host device), 1 policed (token bucket in the programs)",
      "pacing          egress off on eth0: cannot attach fq to eth0: Specified qdisc kind is unknown.",
      "pacing          ingress off: shaped by tbf: no fq (Specified qdisc kind is unknown.)",
    ]);
    // No pod's ingress limited: a stale reason about ingress is not shown.
    s.bandwidth.ingressModes = {};
    expect(formatStatus(s)).not.toMatch(/ingress off/);
  });

  it("names a fullest table whose device is gone by its ifindex, and says when no map is pinned", () => {
    const s = facts();
    s.initialized = false;
    s.maps = [];
    s.flowTables.fullest = {
      device: undefined,
      ifindex: 9,
      containerId: undefined,
      ifname: undefined,
      entries: 3,
      capacity: 1024,
      evicted: 0,
    };
    const lines = formatStatus(s).split("\n");
    expect(lines).toContain("bpffs root      /sys/fs/bpf/netkit-cni (nothing pinned yet)");
    expect(lines).toContain("fullest table   ifindex 9: 3/1024 entries, 0 evicted");
    expect(lines).toContain("maps            none pinned");
    expect(lines.some((l) => l.includes("CAPACITY"))).toBe(false);
  });

  it("leaves out the fullest table when there are no tables", () => {
    const s = facts();
    s.flowTables = { ...s.flowTables, tables: 0, entries: 0, fullest: undefined };
    expect(formatStatus(s)).not.toMatch(/^fullest table/m);
  });

  it("says nothing of refusals on a node without maps", () => {
    const s = facts();
    s.drops = undefined;
    expect(formatStatus(s)).not.toMatch(/^refused/m);
  });

  it("says what the socket bypass refused, only when it refused something", () => {
    const s = facts();
    s.sockBypass.links = [{ pin: "sock/sk_msg", linkId: 5, programId: 21 }];
    s.sockBypass.sockets = 2;
    expect(formatStatus(s)).toMatch(/^socket bypass +on: sock\/sk_msg \(program 21\); 2 sockets spliced$/m);
    s.sockBypass.refusedBound = 104;
    s.sockBypass.refusedNetns = 2;
    expect(formatStatus(s)).toMatch(
      /; 2 sockets spliced; refused: 104 over a pod's bound of 4096, 2 from another network namespace$/m,
    );
  });

  it("says how many pods, Services and backends are translated, and what the programs counted", () => {
    const s = facts();
    s.serviceTranslation = {
      links: 8,
      pods: 3,
      services: 2,
      backends: 4,
      counters: { translated: 10, refused: 1, reversed: 5, unsure: 0 },
      podState: undefined,
      socketClosing: undefined,
    };
    expect(formatStatus(s)).toMatch(
      /^services +translated at connect for 3 pods: 2 Services, 4 backends; 10 translated, 1 refused \(no backend\), 5 shown back, 0 left to the stack$/m,
    );
  });

  it("sums the pods' own state: affinity held, sockets refused state, what each pod gave up of its own", () => {
    const s = facts();
    s.serviceTranslation = {
      links: 8,
      pods: 3,
      services: 2,
      backends: 4,
      counters: { translated: 10, refused: 0, reversed: 5, unsure: 2 },
      podState: {
        withoutState: 0,
        affinityHeld: 5,
        affinityPerPod: 32,
        noSocketState: 2,
        socketReplaced: 7,
        affinityReplaced: 1,
      },
      socketClosing: undefined,
    };
    expect(formatStatus(s)).toMatch(
      /^services +pods' own state: affinity to 5 Services \(at most 32 a pod\); refused: 2 sockets without socket state \(left to the stack\); given up, each pod its own: 7 of a socket's Services, 1 affinities$/m,
    );
    s.serviceTranslation.podState = {
      ...(s.serviceTranslation.podState as NonNullable<typeof s.serviceTranslation.podState>),
      withoutState: 2,
    };
    expect(formatStatus(s)).toMatch(/; 2 pods recorded by an older build have no state yet$/m);
  });

  it("says when the kernel cannot close a withdrawn backend's sockets, and why", () => {
    const s = facts();
    s.serviceTranslation = {
      links: 8,
      pods: 1,
      services: 0,
      backends: 0,
      counters: undefined,
      podState: undefined,
      socketClosing: "kernel functions bpf_sock_destroy not found in BTF",
    };
    expect(formatStatus(s)).toMatch(
      /^services +cannot close a withdrawn backend's sockets \(the agent refuses --service-translation\): kernel functions bpf_sock_destroy not found in BTF$/m,
    );
  });

  it("lists problems one per line", () => {
    const s = facts();
    s.problems = ["endpoint pins for nk1, which no longer exists (DEL or GC removes them)", "second"];
    expect(formatStatus(s).split("\n").slice(-2)).toEqual([
      "problem         endpoint pins for nk1, which no longer exists (DEL or GC removes them)",
      "problem         second",
    ]);
  });

  it("says how many pods enforce NetworkPolicy, which ways they are isolated, and which policies select them", () => {
    const s = facts();
    expect(formatStatus(s)).toMatch(/^network policy {2}not enforced/m);
    s.networkPolicy = {
      pods: 3,
      isolated: { ingress: 2, egress: 1 },
      pending: 1,
      allowed: { ingress: 10, egress: 4 },
      denied: { ingress: 7, egress: 0 },
      selectedBy: { "x/a": ["x/deny-all", "x/allow-y"] },
      maps: [],
      deniedWhole: {},
      unreadable: [],
      incomplete: 0,
      clusterSelectedBy: {},
    };
    const text = formatStatus(s);
    expect(text).toMatch(
      /^network policy {2}3 pods enforce it: 2 isolated for ingress, 1 for egress, 1 pending; new flows allowed 10 in \/ 4 out, denied 7 in \/ 0 out$/m,
    );
    expect(text).toMatch(/^ {2}x\/a {2}selected by x\/deny-all, x\/allow-y$/m);
    expect(text).not.toMatch(/^ {2}(maps|unreadable) /m);
    expect(text).not.toMatch(/audited by/);
    s.networkPolicy.auditedBy = { "x/b": ["x/try-egress"] };
    expect(formatStatus(s)).toMatch(
      /^ {2}x\/b {2}audited by x\/try-egress \(not enforced: its flows say what they would deny\)$/m,
    );
  });

  it("shows the ClusterNetworkPolicies the agent reads, the pods they select and what it could not read", () => {
    const s = facts();
    const base = {
      pods: 1,
      isolated: { ingress: 1, egress: 0 },
      pending: 0,
      incomplete: 0,
      allowed: { ingress: 0, egress: 0 },
      denied: { ingress: 0, egress: 0 },
      selectedBy: {},
      maps: [],
      deniedWhole: {},
      unreadable: [],
    };
    s.networkPolicy = { ...base, clusterSelectedBy: {}, clusterNetworkPolicy: { version: null, policies: [] } };
    expect(formatStatus(s)).toMatch(
      /^cluster network policy {2}not served \(the ClusterNetworkPolicy CRD is not installed\)$/m,
    );
    s.networkPolicy = {
      ...base,
      clusterSelectedBy: { "x/a": ["no-y-into-x", "dns"] },
      clusterNetworkPolicy: {
        version: "v1beta1",
        policies: [
          { name: "dns", tier: "Baseline", priority: 3, localPods: 1, problems: [] },
          {
            name: "no-y-into-x",
            tier: "Admin",
            priority: 10,
            localPods: 1,
            problems: [{ policy: "cnp:no-y-into-x", kind: "domain-names", reason: "spec.egress[0].to[0]: refused" }],
          },
        ],
      },
    };
    const lines = formatStatus(s).split("\n");
    const at = lines.findIndex((l) => l.startsWith("cluster network policy"));
    expect(lines.slice(at, at + 5)).toEqual([
      "cluster network policy  2 policies (policy.networking.k8s.io/v1beta1)",
      "  dns  Baseline priority 3, selects 1 local pods",
      "  no-y-into-x  Admin priority 10, selects 1 local pods",
      "  no-y-into-x  not read in full: spec.egress[0].to[0]: refused",
      "  x/a  subject of no-y-into-x, dns",
    ]);
  });

  it("shows how full NetworkPolicy's bounded maps are, the pods denied whole and the policies it cannot read", () => {
    const s = facts();
    s.networkPolicy = {
      pods: 2,
      isolated: { ingress: 1, egress: 1 },
      pending: 0,
      incomplete: 1,
      allowed: { ingress: 0, egress: 0 },
      denied: { ingress: 0, egress: 0 },
      selectedBy: { "x/a": ["x/many"], "x/b": ["x/web"] },
      maps: [
        { name: "nkc_pol_pods", entries: 2, capacity: 16384 },
        { name: "nkc_pol_peers", entries: 40, capacity: 262144 },
        { name: "nkc_pol_ports", entries: 65536, capacity: 65536 },
        { name: "nkc_pol_vips", entries: 5, capacity: 65536 },
      ],
      deniedWhole: {
        "x/a": [
          {
            policy: "x/many",
            kind: "rules-bound",
            reason: "egress: 65 rules after merging, the datapath holds 64; all egress denied",
            direction: "egress",
          },
        ],
        "x/b": [
          {
            policy: "x/web",
            kind: "incomplete",
            reason: "ingress: not written in full (no space left on device); all ingress denied until it is",
            direction: "ingress",
          },
        ],
      },
      unreadable: [
        {
          policy: "x/bad",
          kind: "protocol",
          reason: 'spec.ingress[0].ports[0].protocol: "ICMP" is not TCP, UDP or SCTP',
        },
      ],
      clusterSelectedBy: {},
    };
    const lines = formatStatus(s).split("\n");
    const at = lines.findIndex((l) => l.startsWith("network policy"));
    expect(lines[at]).toMatch(/, 0 pending, 1 denied whole \(not written in full\); new flows/);
    expect(lines.slice(at + 1, at + 7)).toEqual([
      "  maps          nkc_pol_pods 2/16384, nkc_pol_peers 40/262144, nkc_pol_ports 65536/65536, nkc_pol_vips 5/65536; full: nkc_pol_ports (the agent's writes to it fail)",
      "  x/a  selected by x/many",
      "  x/a  egress: 65 rules after merging, the datapath holds 64; all egress denied (x/many)",
      "  x/b  selected by x/web",
      "  x/b  ingress: not written in full (no space left on device); all ingress denied until it is (x/web)",
      '  unreadable    x/bad: spec.ingress[0].ports[0].protocol: "ICMP" is not TCP, UDP or SCTP (isolates what it selects, allows nothing)',
    ]);
  });

  it("shows the WireGuard device, whether pods may be added, and each peer's handshake and bytes", () => {
    const s = facts();
    expect(formatStatus(s)).toContain("encryption      off (no WireGuard device: the agent runs without --encryption)");
    s.encryption = {
      device: "netkit-wg0",
      ready: true,
      listenPort: 51871,
      publicKey: "Qk9CQk9CQk9CQk9CQk9CQk9CQk9CQk9CQk9CQk9CQk8=",
      peers: [
        {
          publicKey: "QUxJQ0VBTElDRUFMSUNFQUxJQ0VBTElDRUFMSUNFQUw=",
          endpoint: "[fd30::2]:51871",
          allowedIps: ["10.221.2.0/24", "fd21:2::/64"],
          lastHandshake: 1_780_000_000,
          rxBytes: 1200,
          txBytes: 3400,
        },
        {
          publicKey: "Q0FST0xDQVJPTENBUk9MQ0FST0xDQVJPTENBUk9MQ0E=",
          endpoint: undefined,
          allowedIps: [],
          lastHandshake: 0,
          rxBytes: 0,
          txBytes: 0,
        },
      ],
      unreadable: undefined,
    };
    const lines = formatStatus(s).split("\n");
    const at = lines.findIndex((l) => l.startsWith("encryption"));
    expect(lines.slice(at, at + 3)).toEqual([
      "encryption      WireGuard on netkit-wg0 (ready), port 51871, key Qk9CQk9C…, 2 peers",
      "  peer QUxJQ0VB… [fd30::2]:51871: 10.221.2.0/24, fd21:2::/64; handshake 2026-05-28T20:26:40.000Z; rx 1200 B, tx 3400 B",
      "  peer Q0FST0xD… (no endpoint): no allowed IPs; handshake none yet; rx 0 B, tx 0 B",
    ]);
    s.encryption = { ...s.encryption, ready: false, peers: [], unreadable: "no WireGuard generic netlink family" };
    expect(formatStatus(s)).toContain(
      "encryption      WireGuard on netkit-wg0 (not ready: ADD of an encrypting network waits (code 11)); peers unreadable: no WireGuard generic netlink family",
    );
  });
});
