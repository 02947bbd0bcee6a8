/**
 * Opens the pair of netlink sockets an endpoint needs: one in the host namespace (the
 * caller's), one created inside the pod netns. Close with `closeNamespaces`. A "pod
 * netns" that is the node's own is refused: the pod's end of the pair would be made on
 * the node, under the name the runtime chose, beside the node's own devices. The pod's
 * socket also names the pod netns by its cookie (`podNetnsCookie`).
 */
import * as fs from "node:fs";
import { CniError, ErrorCode } from "../cni/errors";
import { log } from "../log";
import { RtnlSocket } from "../netlink/socket";
import { isOwnNetns, NetnsNotFoundError, openNetns } from "../sys/netns";
import type { Namespaces } from "./types";

export function openNamespaces(podNetnsPath: string): Namespaces {
  let podNetnsFd: number;
  try {
    podNetnsFd = openNetns(podNetnsPath);
  } catch (e) {
    if (e instanceof NetnsNotFoundError) throw new CniError(ErrorCode.InvalidEnvironment, `CNI_NETNS: ${e.message}`);
    throw e;
  }
  if (isOwnNetns(podNetnsFd)) {
    fs.closeSync(podNetnsFd);
    throw new CniError(
      ErrorCode.InvalidEnvironment,
      `CNI_NETNS ${podNetnsPath} is the node's own network namespace, not a pod's`,
    );
  }
  try {
    const pod = RtnlSocket.open(podNetnsFd);
    return { host: RtnlSocket.open(), pod, podNetnsFd };
  } catch (e) {
    fs.closeSync(podNetnsFd);
    throw e;
  }
}

export function closeNamespaces(ns: Namespaces): void {
  ns.host.close();
  ns.pod.close();
  fs.closeSync(ns.podNetnsFd);
}

/**
 * The pod netns's cookie, read from the socket made inside it (the socket bypass admits
 * only sockets of this namespace). Undefined where the kernel cannot say (SO_NETNS_COOKIE
 * came with Linux 5.14): the pod then works without the bypass.
 */
export function podNetnsCookie(ns: Namespaces): bigint | undefined {
  try {
    return ns.pod.netnsCookie();
  } catch (e) {
    log.warn(`socket bypass: no netns cookie for the pod (${(e as Error).message}); its sockets stay on the stack`);
    return undefined;
  }
}
