/**
 * install/daemonset.yaml read as kubelet would read it for the agent's pod: the agent
 * container's command, environment (values, the node's name, the ConfigMap's keys), its
 * hostPath volumes at their mount paths with their propagation, and the ClusterRole its
 * service account is bound to. The agent suites start the agent from this and nothing
 * else (container.ts), so a path, flag or permission the manifest does not give fails a
 * test instead of a cluster.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { loadAllYaml } from "@kubernetes/client-node";

const MANIFEST = path.resolve(__dirname, "../../install/daemonset.yaml");

interface HostPathMount {
  name: string;
  hostPath: string;
  mountPath: string;
  /** kubelet's DirectoryOrCreate makes the host directory. */
  create: boolean;
  /** HostToContainer: mounts made on the host later show up inside. */
  fromHost: boolean;
  readOnly: boolean;
}

interface EnvVar {
  name: string;
  value?: string;
  /** A field of the pod (spec.nodeName). */
  fieldPath?: string;
  configMapKey?: string;
}

export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

export interface AgentPodSpec {
  image: string;
  command: string[];
  env: EnvVar[];
  configMap: Record<string, string>;
  mounts: HostPathMount[];
  privileged: boolean;
  hostNetwork: boolean;
  serviceAccount: string;
  rules: PolicyRule[];
}

type Obj = Record<string, unknown>;
const field = (o: unknown, ...keys: string[]): unknown =>
  keys.reduce<unknown>((v, k) => (v as Obj | undefined)?.[k], o);

export function readDaemonSet(file = MANIFEST): AgentPodSpec {
  const docs = loadAllYaml(fs.readFileSync(file, "utf8")) as Obj[];
  const byKind = (kind: string) => docs.filter((d) => d?.kind === kind);
  const ds = byKind("DaemonSet")[0];
  if (!ds) throw new Error(`${file}: no DaemonSet`);
  const pod = field(ds, "spec", "template", "spec") as Obj;
  const container = (pod.containers as Obj[]).find((c) => c.name === "agent");
  if (!container) throw new Error(`${file}: no container named agent`);
  const volumes = new Map((pod.volumes as Obj[]).map((v) => [v.name as string, v]));
  const mounts = ((container.volumeMounts ?? []) as Obj[]).map((m): HostPathMount => {
    const volume = volumes.get(m.name as string);
    const hostPath = field(volume, "hostPath", "path");
    if (typeof hostPath !== "string") throw new Error(`${file}: volume ${m.name} is not a hostPath`);
    return {
      name: m.name as string,
      hostPath,
      mountPath: m.mountPath as string,
      create: field(volume, "hostPath", "type") === "DirectoryOrCreate",
      fromHost: m.mountPropagation === "HostToContainer" || m.mountPropagation === "Bidirectional",
      readOnly: m.readOnly === true,
    };
  });
  const env = ((container.env ?? []) as Obj[]).map(
    (e): EnvVar => ({
      name: e.name as string,
      value: e.value as string | undefined,
      fieldPath: field(e, "valueFrom", "fieldRef", "fieldPath") as string | undefined,
      configMapKey: field(e, "valueFrom", "configMapKeyRef", "key") as string | undefined,
    }),
  );
  const serviceAccount = pod.serviceAccountName as string;
  const binding = byKind("ClusterRoleBinding").find((b) =>
    (b.subjects as Obj[]).some((s) => s.kind === "ServiceAccount" && s.name === serviceAccount),
  );
  const role = byKind("ClusterRole").find((r) => field(r, "metadata", "name") === field(binding, "roleRef", "name"));
  return {
    image: container.image as string,
    command: container.command as string[],
    env,
    configMap: (byKind("ConfigMap")[0]?.data ?? {}) as Record<string, string>,
    mounts,
    privileged: field(container, "securityContext", "privileged") === true,
    hostNetwork: pod.hostNetwork === true,
    serviceAccount,
    rules: ((role?.rules ?? []) as PolicyRule[]).map((r) => ({
      apiGroups: r.apiGroups,
      resources: r.resources,
      verbs: r.verbs,
    })),
  };
}

/** `$(VAR)` in a command, expanded as kubelet does from the container's environment. */
export const expand = (arg: string, env: Record<string, string>): string =>
  arg.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (whole, name: string) => env[name] ?? whole);
