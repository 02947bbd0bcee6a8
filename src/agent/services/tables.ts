/**
 * The Service controller's tables on this node: the pinned maps (made from bpf_svc.o's
 * specs where no ADD made them yet: the agent fills them before the first translating pod
 * arrives), and closing the sockets connected to a (Service, backend) pair a write
 * withdrew (bpf/svc-destroy.ts: the iterators read each socket's own storage) in the
 * namespaces of the pods that asked for translation (pod-namespaces.ts): a connected
 * client would otherwise keep talking to a withdrawn backend, as kube-proxy flushes
 * conntrack for the same reason.
 */
import { openOrCreateSvcMaps, requireNodeBpffs, type SocketCloser } from "../../bpf/index";
import type { ServiceTables } from "./controller";
import { namespacesWithCookies } from "./pod-namespaces";

export function kernelServiceTables(bpffsRoot: string, object: () => Buffer, closer: SocketCloser): ServiceTables {
  return {
    open: () => {
      requireNodeBpffs(bpffsRoot);
      return openOrCreateSvcMaps(bpffsRoot, object());
    },
    closeWithdrawn: (maps, withdrawn) => {
      const cookies = new Set([...maps.netns.keys()].map((k) => k.readBigUInt64LE(0)));
      return closer.closeSocketsOfWithdrawn(withdrawn, namespacesWithCookies(cookies), maps.sockets);
    },
  };
}
