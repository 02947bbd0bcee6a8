/** A flow record for tests: a TCP connection from a/client to b/server, allowed; `over` changes any field. */
import type { FlowRecord } from "../../src/flows/record";

export function flowRecord(over: Partial<FlowRecord> = {}): FlowRecord {
  return {
    time: "2026-12-06T10:00:00.123Z",
    node: "node-a",
    direction: "ingress",
    subject: "b/server",
    protocol: "TCP",
    source: { ip: "10.0.0.5", port: 41234, kind: "pod", namespace: "a", pod: "client" },
    destination: { ip: "10.0.1.7", port: 80, kind: "pod", namespace: "b", pod: "server" },
    verdict: "forwarded",
    reason: "allowed",
    tier: "networkPolicy",
    policy: "b/allow-a ingress rule 0",
    policies: ["b/allow-a"],
    state: "new",
    datapath: "netkit",
    ...over,
  };
}
