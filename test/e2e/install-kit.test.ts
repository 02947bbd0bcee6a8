/**
 * The install kit for clusters, as far as a machine without Docker or Kubernetes can
 * take it: the manifests parse and say what they must (RBAC limited to reading nodes,
 * Services, EndpointSlices, Pods, Namespaces and NetworkPolicies, and patching nodes for
 * the WireGuard key, a privileged host-network agent with the node name from the downward API, hostPath
 * mounts of the CNI dirs, /run/netkit-cni and bpffs, probes on its port; kind with its
 * CNI off and 2+ nodes), the agent's command line is one the agent accepts, every script
 * passes shellcheck, and install/kind/up.sh and conformance.sh run against stand-ins for
 * docker, kind, kubectl and e2e.test: image built and loaded, DaemonSet applied with
 * kind's pod subnet, no route made by hand, Kubernetes' sig-network conformance tests
 * run with the right focus. The agent itself runs for real in test/agent/.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { parseAgentOptions } from "../../src/agent/options";
import { Fixture } from "../support/harness";

const REPO = path.resolve(__dirname, "../..");
const PYTHON = fs.existsSync("/usr/bin/python3") ? "/usr/bin/python3" : "python3";

// biome-ignore lint/suspicious/noExplicitAny: parsed YAML, checked field by field by the assertions
type Doc = Record<string, any>;

function yamlDocs(file: string): Doc[] {
  const r = spawnSync(
    PYTHON,
    ["-c", "import sys, yaml, json; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))", file],
    { encoding: "utf8" },
  );
  if (r.status !== 0)
    throw new Error(`YAML parse of ${file} failed (python3-yaml: run test/e2e/setup.sh): ${r.stderr}`);
  return (JSON.parse(r.stdout) as (Doc | null)[]).filter((d): d is Doc => d !== null);
}

function shellcheck(args: string[], input?: string): { ok: boolean; out: string } {
  // From the repository root, so `# shellcheck source=scripts/…` directives resolve.
  const r = spawnSync("shellcheck", args, { encoding: "utf8", input, cwd: REPO });
  if (r.error) throw new Error(`shellcheck not found (run test/e2e/setup.sh): ${r.error.message}`);
  return { ok: r.status === 0, out: `${r.stdout}${r.stderr}` };
}

function agentContainer(): { container: Doc; ds: Doc; config: Doc } {
  const docs = yamlDocs(path.join(REPO, "install/daemonset.yaml"));
  const ds = docs.find((d) => d.kind === "DaemonSet") as Doc;
  const config = docs.find((d) => d.kind === "ConfigMap") as Doc;
  return { container: ds.spec.template.spec.containers[0] as Doc, ds, config };
}

describe("install kit for clusters", () => {
  let fx: Fixture;
  beforeEach(() => {
    fx = new Fixture();
  });
  afterEach(() => fx.cleanup());

  it("manifests parse and carry RBAC, downward API, privileges and mounts; kind config disables the CNI", () => {
    const docs = yamlDocs(path.join(REPO, "install/daemonset.yaml"));
    const byKind = new Map(docs.map((d) => [d.kind as string, d]));
    expect([...byKind.keys()].sort()).toEqual([
      "ClusterRole",
      "ClusterRoleBinding",
      "ConfigMap",
      "DaemonSet",
      "ServiceAccount",
    ]);
    expect(byKind.get("ClusterRole")?.rules).toEqual([
      { apiGroups: [""], resources: ["nodes"], verbs: ["get", "list", "watch"] },
      // --encryption=wireguard publishes the node's key on its own Node: the one write.
      { apiGroups: [""], resources: ["nodes"], verbs: ["patch"] },
      { apiGroups: [""], resources: ["services"], verbs: ["get", "list", "watch"] },
      { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["get", "list", "watch"] },
      { apiGroups: [""], resources: ["pods", "namespaces"], verbs: ["get", "list", "watch"] },
      { apiGroups: ["networking.k8s.io"], resources: ["networkpolicies"], verbs: ["get", "list", "watch"] },
      // ClusterNetworkPolicy: read, and each policy's status conditions written.
      {
        apiGroups: ["policy.networking.k8s.io"],
        resources: ["clusternetworkpolicies"],
        verbs: ["get", "list", "watch"],
      },
      { apiGroups: ["policy.networking.k8s.io"], resources: ["clusternetworkpolicies/status"], verbs: ["patch"] },
    ]);
    const binding = byKind.get("ClusterRoleBinding") as Doc;
    expect(binding.roleRef).toMatchObject({ kind: "ClusterRole", name: "netkit-cni" });
    expect(binding.subjects).toEqual([{ kind: "ServiceAccount", name: "netkit-cni", namespace: "kube-system" }]);

    const { container, ds } = agentContainer();
    const pod = ds.spec.template.spec as Doc;
    expect(pod.serviceAccountName).toBe("netkit-cni");
    expect(pod.hostNetwork).toBe(true);
    expect(pod.tolerations).toEqual([{ operator: "Exists" }]);
    // No init container reading the API with curl: the agent does it, in the main container.
    expect(pod.initContainers).toBeUndefined();
    expect(pod.containers).toHaveLength(1);
    expect(container.command.slice(0, 2)).toEqual(["/usr/local/bin/netkit-cni", "agent"]);
    expect(container.securityContext).toEqual({ privileged: true });
    expect(container.env).toContainEqual({
      name: "NODE_NAME",
      valueFrom: { fieldRef: { fieldPath: "spec.nodeName" } },
    });
    expect(container.livenessProbe.httpGet).toEqual({ path: "/healthz", port: 9968 });
    expect(container.readinessProbe.httpGet).toEqual({ path: "/readyz", port: 9968 });
    const mounts = Object.fromEntries((container.volumeMounts as Doc[]).map((m) => [m.name, m.mountPath]));
    const volumes = Object.fromEntries((pod.volumes as Doc[]).map((v) => [v.name, v.hostPath?.path]));
    expect(mounts).toEqual({
      "cni-bin": "/host/opt/cni/bin",
      "cni-conf": "/host/etc/cni/net.d",
      run: "/run/netkit-cni",
      // What outlives a reboot: the node's WireGuard key (--agent-data-dir).
      data: "/var/lib/netkit-cni",
      bpffs: "/sys/fs/bpf",
      netns: "/run/netns",
      // A verb the agent does (--serve-verbs) uses the plugin's IPAM store and log.
      ipam: "/var/lib/cni/networks",
      log: "/var/log",
    });
    expect(volumes).toEqual({
      "cni-bin": "/opt/cni/bin",
      "cni-conf": "/etc/cni/net.d",
      run: "/run/netkit-cni",
      data: "/var/lib/netkit-cni",
      bpffs: "/sys/fs/bpf",
      netns: "/run/netns",
      ipam: "/var/lib/cni/networks",
      log: "/var/log",
    });
    // Pods' namespaces are mounted after the agent starts: they must reach its container.
    const netns = (container.volumeMounts as Doc[]).find((m) => m.name === "netns");
    expect(netns?.mountPropagation).toBe("HostToContainer");
    expect(ds.spec.selector.matchLabels).toEqual(ds.spec.template.metadata.labels);

    const [kind] = yamlDocs(path.join(REPO, "install/kind/cluster.yaml")) as [Doc];
    expect(kind).toMatchObject({
      kind: "Cluster",
      apiVersion: "kind.x-k8s.io/v1alpha4",
      networking: { disableDefaultCNI: true },
    });
    expect((kind.nodes as Doc[]).length).toBeGreaterThanOrEqual(2);
  });

  it("scripts pass shellcheck", () => {
    const files = [
      "install/install.sh",
      "install/kind/up.sh",
      "install/kind/conformance.sh",
      "test/e2e/setup.sh",
      "scripts/deps.sh",
      "scripts/apt.sh",
      "test/vm/kernel.sh",
    ];
    const r = shellcheck(["-x", ...files]);
    expect(r.out).toBe("");
    expect(r.ok).toBe(true);
  });

  it("the agent's command line, with the ConfigMap's values, is one the agent accepts", () => {
    const { container, config } = agentContainer();
    const env = Object.fromEntries(
      (container.env as Doc[])
        .filter((e) => e.valueFrom?.configMapKeyRef)
        .map((e) => [e.name, config.data[e.valueFrom.configMapKeyRef.key]]),
    );
    // Kubernetes expands $(VAR) from the container's env.
    const args = (container.command.slice(2) as string[]).map((a) => a.replace(/\$\((\w+)\)/g, (_, v) => env[v] ?? ""));
    const opts = parseAgentOptions(args, { NODE_NAME: "worker-1" }, "host");
    expect(opts).toMatchObject({
      nodeName: "worker-1",
      clusterCidrs: ["10.244.0.0/16"],
      masquerade: true,
      metricsAddress: ":9968",
      stateDir: "/run/netkit-cni/agent",
      installBinary: true,
    });
    expect(opts.installArgs).toEqual(
      expect.arrayContaining(["--bin-dir=/host/opt/cni/bin", "--conf-dir=/host/etc/cni/net.d", "--datapath=auto"]),
    );
  });

  /**
   * One stub for docker, kind, kubectl and e2e.test: logs each call (and what `kubectl
   * apply -f -` reads) and answers what the scripts ask (node names, Ready, pod IPs).
   */
  function standIns(dir: string): string {
    const stubs = path.join(dir, "bin");
    fs.mkdirSync(stubs);
    const stub = `#!/bin/bash
set -euo pipefail
root=${JSON.stringify(dir)}
tool=$(basename "$0")
echo "$tool $*" >> "$root/calls.log"
case "$tool $1" in
  "kind get") if [ "$2" = nodes ]; then printf '%s\\n' netkit-control-plane netkit-worker netkit-worker2; fi ;;
  "kind create"|"kind load"|"docker build"|"docker exec") ;;
  "kind get"*) ;;
  "e2e.test "*) ;;
  "kubectl --context")
    shift 2
    case "$1 $2" in
      "apply -f") cat >> "$root/applied.yaml" ;;
      "get pod") case "$3" in nk-a) printf 10.244.1.2 ;; nk-b) printf 10.244.2.2 ;; esac ;;
      "version -o") printf '{\\n  "serverVersion": {\\n    "gitVersion": "v1.31.0"\\n  }\\n}\\n' ;;
      *) ;;
    esac ;;
esac
`;
    fs.writeFileSync(path.join(stubs, "stub"), stub, { mode: 0o755 });
    for (const t of ["docker", "kind", "kubectl", "e2e.test"]) fs.symlinkSync("stub", path.join(stubs, t));
    return stubs;
  }

  const runScript = (script: string, dir: string, env: Record<string, string> = {}, args: string[] = []) =>
    spawnSync(path.join(REPO, script), args, {
      encoding: "utf8",
      env: { PATH: `${standIns(dir)}:/usr/sbin:/usr/bin:/sbin:/bin`, HOME: dir, ...env },
      timeout: 120_000,
    });

  it("kind/up.sh builds and loads the image and applies the DaemonSet: no routes by hand (docker, kind, kubectl stood in)", () => {
    const dir = fx.tempDir("nke2e-kind-");
    const r = runScript("install/kind/up.sh", dir);
    expect(r.status, `${r.stdout}${r.stderr}`).toBe(0);
    const calls = fs.readFileSync(path.join(dir, "calls.log"), "utf8");
    expect(calls).toMatch(/^docker build -q -f .*install\/Dockerfile -t localhost\/netkit-cni:0\.1\.0 /m);
    expect(calls).toMatch(/^kind create cluster --name netkit --config .*install\/kind\/cluster.yaml/m);
    expect(calls).toMatch(/^kind load docker-image localhost\/netkit-cni:0\.1\.0 --name netkit$/m);
    expect(calls).toMatch(/^kubectl --context kind-netkit apply -f -$/m);
    expect(calls).toMatch(/^kubectl --context kind-netkit wait --for=condition=Ready nodes --all/m);
    expect(calls).toMatch(/kubectl --context kind-netkit exec nk-a -- ping -c 3 -W 2 10\.244\.2\.2/);
    expect(calls).toMatch(/kubectl --context kind-netkit exec nk-b -- ping -c 3 -W 2 10\.244\.1\.2/);
    // Nothing on the nodes by hand: no docker cp, no ip route.
    expect(calls).not.toMatch(/docker cp|ip route/);
    // The manifest applied is ours, with kind's pod subnet as the cluster CIDR.
    const applied = fs.readFileSync(path.join(dir, "applied.yaml"), "utf8");
    const manifest = fs.readFileSync(path.join(REPO, "install/daemonset.yaml"), "utf8");
    expect(applied.startsWith(manifest.split("\n---\n")[0] ?? "")).toBe(true);
    expect(applied).toMatch(/^ {2}cluster-cidr: "10\.244\.0\.0\/16"$/m);
    expect(applied).toMatch(/^ {2}datapath: "auto"$/m);
  });

  it("kind/conformance.sh brings the cluster up and runs e2e.test on sig-network's conformance tests", () => {
    const dir = fx.tempDir("nke2e-conf-");
    const artifacts = path.join(dir, "artifacts");
    const r = runScript("install/kind/conformance.sh", dir, {
      E2E_TEST: path.join(dir, "bin/e2e.test"),
      ARTIFACTS: artifacts,
      NETKIT_CNI_DATAPATH: "veth",
    });
    expect(r.status, `${r.stdout}${r.stderr}`).toBe(0);
    const calls = fs.readFileSync(path.join(dir, "calls.log"), "utf8").trim().split("\n");
    // up.sh first (the cluster Ready), then the tests with the cluster's kubeconfig.
    const ready = calls.findIndex((c) => c.includes("wait --for=condition=Ready nodes --all"));
    const e2e = calls.findIndex((c) => c.startsWith("e2e.test "));
    expect(ready).toBeGreaterThan(-1);
    expect(e2e).toBeGreaterThan(ready);
    expect(calls[e2e]).toBe(
      `e2e.test --kubeconfig=${artifacts}/kubeconfig --provider=skeleton ` +
        `--ginkgo.focus=\\[sig-network\\].*\\[Conformance\\] --report-dir=${artifacts} --ginkgo.timeout=3h`,
    );
    expect(calls).toContain("kind get kubeconfig --name netkit");
    expect(fs.readFileSync(path.join(dir, "applied.yaml"), "utf8")).toMatch(/^ {2}datapath: "veth"$/m);
  });

  it("kind/conformance.sh netpol runs upstream's NetworkPolicy tests; an unknown suite is refused before any cluster", () => {
    const dir = fx.tempDir("nke2e-netpol-");
    const artifacts = path.join(dir, "artifacts");
    const env = { E2E_TEST: path.join(dir, "bin/e2e.test"), ARTIFACTS: artifacts };
    const r = runScript("install/kind/conformance.sh", dir, env, ["netpol"]);
    expect(r.status, `${r.stdout}${r.stderr}`).toBe(0);
    const calls = fs.readFileSync(path.join(dir, "calls.log"), "utf8").trim().split("\n");
    expect(calls.find((c) => c.startsWith("e2e.test "))).toContain(
      "--ginkgo.focus=\\[sig-network\\].*Feature:NetworkPolicy ",
    );

    const other = fx.tempDir("nke2e-bad-");
    const bad = runScript("install/kind/conformance.sh", other, env, ["smoke"]);
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toMatch(/unknown suite 'smoke' \(conformance or netpol\)/);
    expect(fs.existsSync(path.join(other, "calls.log"))).toBe(false);
  });
});
