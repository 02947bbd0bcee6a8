/**
 * The Service controller's tables on this node: the pinned maps (made from bpf_svc.o's
 * specs where no ADD made them yet: the agent fills them before the first translating pod
 * arrives), and closing the sockets translated to a withdrawn backend (bpf/svc-destroy.ts)
 * in the namespaces of the pods that asked for translation (pod-namespaces.ts): a
 * connected client would otherwise keep talking to it, as kube-proxy flushes conntrack
 * for the same reason.
 */
import {
  decodeOrigin,
  decodeRevKey,
  ensureBpffsRoot,
  openOrCreateSvcMaps,
  type SocketCloser,
  type SvcMaps,
} from "../bpf/index";
import type { ServiceTables, Withdrawn } from "./controllers/services";
import { namespacesWithCookies } from "./pod-namespaces";

export function kernelServiceTables(bpffsRoot: string, object: () => Buffer, closer: SocketCloser): ServiceTables {
  return {
    open: () => {
      ensureBpffsRoot(bpffsRoot);
      return openOrCreateSvcMaps(bpffsRoot, object());
    },
    closeWithdrawn: (maps, withdrawn) => closeWithdrawn(maps, closer, withdrawn),
  };
}

const endpoint = (e: { ip: string; port: number }) => `${e.ip}|${e.port}`;

/** The sockets whose way back names a withdrawn backend of the Service they asked for. */
function closeWithdrawn(maps: SvcMaps, closer: SocketCloser, withdrawn: readonly Withdrawn[]): number {
  const gone = new Map<string, Set<string>>();
  for (const w of withdrawn) {
    const set = gone.get(endpoint(w.frontend)) ?? new Set<string>();
    for (const b of w.backends) set.add(endpoint(b));
    gone.set(endpoint(w.frontend), set);
  }
  const doomed: { key: Buffer; cookie: bigint }[] = [];
  for (const key of [...maps.rev.keys()]) {
    const value = maps.rev.lookup(key);
    if (!value) continue;
    const rev = decodeRevKey(key);
    if (gone.get(endpoint(decodeOrigin(value)))?.has(endpoint(rev))) doomed.push({ key, cookie: rev.socketCookie });
  }
  if (doomed.length === 0) return 0;
  const cookies = new Set([...maps.netns.keys()].map((k) => k.readBigUInt64LE(0)));
  const closed = closer.closeSockets(
    doomed.map((d) => d.cookie),
    namespacesWithCookies(cookies),
  );
  for (const d of doomed) maps.rev.delete(d.key);
  return closed.length;
}
