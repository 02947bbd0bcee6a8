/**
 * The agent started as kubelet and a runtime start the DaemonSet's container
 * (daemonset.ts reads install/daemonset.yaml): in the node's network namespace (it is
 * hostNetwork), in a mount namespace of its own whose root holds only what the image
 * and the pod spec give it:
 *
 * - the image: the executable at /usr/local/bin/netkit-cni, the machine's /usr and /etc
 *   read-only (Debian, as the image's base; nft among them), /proc, a fresh /sys (of the
 *   node's network namespace), /dev (privileged), empty /run, /tmp and /var;
 * - the service account's token, CA and namespace at
 *   /var/run/secrets/kubernetes.io/serviceaccount, and KUBERNETES_SERVICE_HOST/PORT;
 * - each hostPath volume at its mountPath, made first where its type is
 *   DirectoryOrCreate, receiving the host's later mounts where its propagation is
 *   HostToContainer, private otherwise;
 * - the command and environment of the manifest ($(VAR) expanded, the node's name from
 *   spec.nodeName, the ConfigMap's keys), plus what a test must vary.
 *
 * Nothing of the test's own machine leaks in: /run/netns, for one, is there only if the
 * manifest mounts it. The process spawned becomes the agent itself (every step execs),
 * so signals reach it.
 */
import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { type AgentPodSpec, expand } from "./daemonset";

interface ContainerOptions {
  pod: AgentPodSpec;
  /** The node's network namespace (a name under /run/netns). */
  netns: string;
  nodeName: string;
  /** The node's mount namespace (a sandbox's `/proc/<pid>/ns/mnt`); the machine's when absent. */
  hostMountNs?: string;
  /** Host directories that stand in for some of the manifest's hostPaths (a test node's CNI directories). */
  hostPaths?: Record<string, string>;
  /** ConfigMap keys that differ from the manifest's. */
  configMap?: Record<string, string>;
  /** A directory holding token, ca.crt and namespace. */
  serviceAccountDir: string;
  apiHost: string;
  apiPort: number;
  /** The executable the image carries. */
  binary: string;
  /** An empty directory the container's root is mounted on (inside its mount namespace only). */
  rootDir: string;
  /** Flags after the manifest's command. */
  extraArgs: string[];
  /** Variables beyond the manifest's: a fault test's failure injection (src/sys/failpoints.ts). */
  extraEnv?: Record<string, string>;
}

const IMAGE_BINARY = "/usr/local/bin/netkit-cni";
const SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount";
const CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** The container's environment, as kubelet makes it from the manifest. */
function containerEnv(o: ContainerOptions): Record<string, string> {
  const configMap = { ...o.pod.configMap, ...o.configMap };
  const env: Record<string, string> = {
    PATH: CONTAINER_PATH,
    HOSTNAME: o.nodeName,
    KUBERNETES_SERVICE_HOST: o.apiHost,
    KUBERNETES_SERVICE_PORT: String(o.apiPort),
  };
  for (const e of o.pod.env) {
    if (e.value !== undefined) env[e.name] = expand(e.value, env);
    else if (e.fieldPath === "spec.nodeName") env[e.name] = o.nodeName;
    else if (e.configMapKey !== undefined) {
      const v = configMap[e.configMapKey];
      if (v === undefined) throw new Error(`the ConfigMap has no key ${e.configMapKey}`);
      env[e.name] = v;
    } else throw new Error(`env ${e.name}: a source the harness does not know`);
  }
  return { ...env, ...o.extraEnv };
}

/** The shell script that builds the container's root inside a new mount namespace and execs the agent. */
function setupScript(o: ContainerOptions): string {
  const r = (p: string) => q(path.join(o.rootDir, p));
  const lines = [
    "set -e",
    `mount -t tmpfs -o mode=0755 nkt-agent-root ${q(o.rootDir)}`,
    ...["usr", "etc", "proc", "sys", "dev", "run", "tmp", "var", "root"].map((d) => `mkdir ${r(d)}`),
    ...["bin", "sbin", "lib", "lib64"].map((d) => `ln -s usr/${d} ${r(d)}`),
    // The image: the machine's Debian userland, read-only, and our executable.
    `mount --rbind /usr ${r("usr")}`,
    `mount -t tmpfs -o mode=0755 nkt-image-bin ${r("usr/local/bin")}`,
    `touch ${r(IMAGE_BINARY)}`,
    `mount --bind ${q(o.binary)} ${r(IMAGE_BINARY)}`,
    `mount -o remount,bind,ro ${r("usr")}`,
    `mount --rbind /etc ${r("etc")}`,
    `mount -o remount,bind,ro ${r("etc")}`,
    `mount -t proc proc ${r("proc")}`,
    `mount -t sysfs sysfs ${r("sys")}`,
    `mount --rbind /dev ${r("dev")}`,
    ...["run", "var"].map((d) => `mount -t tmpfs -o mode=0755 nkt-${d} ${r(d)}`),
    `mount -t tmpfs -o mode=1777 nkt-tmp ${r("tmp")}`,
    `ln -s ../run ${r("var/run")}`,
    `mkdir -p ${r("var/tmp")} ${r("var/cache")} ${r("var/lib")} ${r("var/log")}`,
    // The pod's service account, projected by kubelet.
    `mkdir -p ${r(SERVICE_ACCOUNT.replace("/var/run", "/run"))}`,
    `mount --bind ${q(o.serviceAccountDir)} ${r(SERVICE_ACCOUNT.replace("/var/run", "/run"))}`,
  ];
  for (const m of o.pod.mounts) {
    const host = o.hostPaths?.[m.hostPath] ?? m.hostPath;
    if (m.create) lines.push(`mkdir -p ${q(host)}`);
    lines.push(
      `mkdir -p ${r(m.mountPath)}`,
      `mount --rbind ${q(host)} ${r(m.mountPath)}`,
      `mount --make-r${m.fromHost ? "slave" : "private"} ${r(m.mountPath)}`,
    );
    if (m.readOnly) lines.push(`mount -o remount,bind,ro ${r(m.mountPath)}`);
  }
  lines.push(`exec chroot ${q(o.rootDir)} "$@"`);
  return lines.join("\n");
}

/** Starts the agent's container; the child is the agent process. */
export function spawnAgentContainer(o: ContainerOptions): ChildProcess {
  fs.mkdirSync(o.rootDir, { recursive: true });
  const env = containerEnv(o);
  const argv = [...o.pod.command.map((a) => expand(a, env)), ...o.extraArgs];
  if (argv[0] !== IMAGE_BINARY) throw new Error(`the manifest runs ${argv[0]}, not the image's ${IMAGE_BINARY}`);
  const enter = [`--net=/run/netns/${o.netns}`, ...(o.hostMountNs ? [`--mount=${o.hostMountNs}`] : [])];
  // Slave: the host's mounts keep arriving (HostToContainer volumes take them); nothing
  // mounted inside leaks out.
  return spawn(
    "nsenter",
    [...enter, "unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", setupScript(o), "agent", ...argv],
    { stdio: ["ignore", "pipe", "pipe"], env },
  );
}
