/**
 * This build's eBPF objects, as the executable carries them (sys/embedded-assets.ts; from
 * dist/bpf when run from source): the node's programs, the socket bypass's and Service translation's.
 */
import { DIGEST_FILE, type NodeObjects, nodeObjectsFrom } from "../bpf/objects";
import { isPackagedExecutable, readAsset } from "../sys/embedded-assets";
import type { ServiceTranslationObjects } from "./service-translation";
import type { SockBypassObjects } from "./sockbypass";

const asset = (file: string) => readAsset(file, `bpf/${file}`);

/** The objects' digest travels only in the executables (scripts/build.mjs); run from the
 * build tree, the objects' bytes give it. */
const nodeObject = (file: string): Buffer | undefined =>
  file !== DIGEST_FILE ? asset(file) : isPackagedExecutable() ? readAsset(file, file) : undefined;

export const embeddedObjects = (): NodeObjects => nodeObjectsFrom(nodeObject);

const epoch = () => Number(asset("epoch").toString("utf8").trim()) || 0;

export const embeddedSockObject = (): SockBypassObjects => ({ object: asset("bpf_sock.o"), epoch: epoch() });

export const embeddedSvcObject = (): ServiceTranslationObjects => ({ object: asset("bpf_svc.o"), epoch: epoch() });

/** The socket iterators that close a withdrawn backend's sockets (the agent loads them). */
export const embeddedSvcDestroyObject = (): Buffer => asset("bpf_svc_destroy.o");
