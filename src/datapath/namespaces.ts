/**
 * Opens the pair of netlink sockets an endpoint needs: one in the host namespace (the
 * caller's), one created inside the pod netns. Close with `closeNamespaces`. A "pod
 * netns" that is the node's own is refused: the pod's end of the pair would be made on
 * the node, under the name the runtime chose, beside the node's own devices.
 */
import * as fs from "node:fs";
import { CniError, ErrorCode } from "../cni/errors";
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
