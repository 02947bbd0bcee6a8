/**
 * The install kit for clusters, as far as a machine without Docker or Kubernetes can
 * take it: the manifests parse and say what they must (RBAC limited to `get nodes`, a
 * privileged init container with the node name from the downward API, hostPath mounts
 * of the CNI dirs; kind with its CNI off and 2+ nodes), every script passes shellcheck,
 * the DaemonSet's init script runs for real against a stand-in API server (TLS, bearer
 * token) and installs with the node's pod CIDRs, and install/kind/up.sh runs against
 * stand-ins for docker, kind and kubectl that execute the real `netkit-cni install` per
 * node and record the routes it adds.
 */
import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as https from "node:https";
import type { AddressInfo } from "node:net";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Fixture } from "../integration/harness";
import { PLUGIN_BINARY } from "./sandbox";

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

function initScript(): { script: string; container: Doc; ds: Doc } {
  const ds = yamlDocs(path.join(REPO, "install/daemonset.yaml")).find((d) => d.kind === "DaemonSet") as Doc;
  const container = ds.spec.template.spec.initContainers[0] as Doc;
  return { script: container.command[2] as string, container, ds };
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
    expect(byKind.get("ClusterRole")?.rules).toEqual([{ apiGroups: [""], resources: ["nodes"], verbs: ["get"] }]);
    const binding = byKind.get("ClusterRoleBinding") as Doc;
    expect(binding.roleRef).toMatchObject({ kind: "ClusterRole", name: "netkit-cni" });
    expect(binding.subjects).toEqual([{ kind: "ServiceAccount", name: "netkit-cni", namespace: "kube-system" }]);

    const { container, ds } = initScript();
    const pod = ds.spec.template.spec as Doc;
    expect(pod.serviceAccountName).toBe("netkit-cni");
    expect(pod.hostNetwork).toBe(true);
    expect(pod.tolerations).toEqual([{ operator: "Exists" }]);
    expect(container.securityContext).toEqual({ privileged: true });
    expect(container.env).toContainEqual({
      name: "NODE_NAME",
      valueFrom: { fieldRef: { fieldPath: "spec.nodeName" } },
    });
    const mounts = Object.fromEntries((container.volumeMounts as Doc[]).map((m) => [m.name, m.mountPath]));
    const volumes = Object.fromEntries((pod.volumes as Doc[]).map((v) => [v.name, v.hostPath?.path]));
    expect(mounts).toEqual({ "cni-bin": "/host/opt/cni/bin", "cni-conf": "/host/etc/cni/net.d" });
    expect(volumes).toEqual({ "cni-bin": "/opt/cni/bin", "cni-conf": "/etc/cni/net.d" });
    expect(ds.spec.selector.matchLabels).toEqual(ds.spec.template.metadata.labels);

    const [kind] = yamlDocs(path.join(REPO, "install/kind/cluster.yaml")) as [Doc];
    expect(kind).toMatchObject({
      kind: "Cluster",
      apiVersion: "kind.x-k8s.io/v1alpha4",
      networking: { disableDefaultCNI: true },
    });
    expect((kind.nodes as Doc[]).length).toBeGreaterThanOrEqual(2);
  });

  it("scripts pass shellcheck (the DaemonSet's inline init script too)", () => {
    const files = [
      "install/install.sh",
      "install/kind/up.sh",
      "test/e2e/setup.sh",
      "scripts/deps.sh",
      "scripts/apt.sh",
      "test/vm/kernel.sh",
    ];
    const r = shellcheck(["-x", ...files]);
    expect(r.out).toBe("");
    expect(r.ok).toBe(true);
    const inline = shellcheck(["-s", "sh", "-"], initScript().script);
    expect(inline.out).toBe("");
  });

  it("the init script reads the node's pod CIDRs from the API with its token and installs with them", async () => {
    const dir = fx.tempDir("nke2e-ds-");
    const sa = path.join(dir, "sa");
    fs.mkdirSync(sa);
    const gen = spawnSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=127.0.0.1",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
        "-keyout",
        path.join(dir, "key.pem"),
        "-out",
        path.join(sa, "ca.crt"),
      ],
      { encoding: "utf8" },
    );
    expect(gen.status, gen.stderr).toBe(0);
    fs.writeFileSync(path.join(sa, "token"), "secret-token\n");

    const requests: { url: string; auth: string | undefined }[] = [];
    const server = https.createServer(
      { key: fs.readFileSync(path.join(dir, "key.pem")), cert: fs.readFileSync(path.join(sa, "ca.crt")) },
      (req, res) => {
        requests.push({ url: req.url ?? "", auth: req.headers.authorization });
        if (req.headers.authorization !== "Bearer secret-token") {
          res.writeHead(401).end();
          return;
        }
        if (req.url !== "/api/v1/nodes/worker-1") {
          res.writeHead(404).end();
          return;
        }
        res.writeHead(200, { "content-type": "application/json" });
        // As the API server prints it: indented, podCIDR and podCIDRs (dual-stack).
        res.end(
          JSON.stringify(
            {
              kind: "Node",
              metadata: { name: "worker-1", annotations: { note: "podCIDR is in spec" } },
              spec: { podCIDR: "10.244.2.0/24", podCIDRs: ["10.244.2.0/24", "fd00:10:244:2::/64"] },
            },
            null,
            2,
          ),
        );
      },
    );
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    fx.processes.push({ kill: () => server.close() });
    const port = (server.address() as AddressInfo).port;

    const host = path.join(dir, "host");
    const env = {
      PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
      KUBERNETES_SERVICE_HOST: "127.0.0.1",
      KUBERNETES_SERVICE_PORT: String(port),
      NODE_NAME: "worker-1",
      CLUSTER_CIDR: "10.244.0.0/16,fd00:10:244::/56",
      DATAPATH: "auto",
      SA_DIR: sa,
      HOST_ROOT: host,
      NETKIT_CNI: PLUGIN_BINARY,
    };
    const run = () =>
      new Promise<{ code: number | null; out: string }>((resolve) => {
        const child = spawn("/bin/sh", ["-c", initScript().script], { env });
        let out = "";
        child.stdout.on("data", (d: Buffer) => {
          out += d.toString();
        });
        child.stderr.on("data", (d: Buffer) => {
          out += d.toString();
        });
        child.on("close", (code) => resolve({ code, out }));
      });
    const first = await run();
    expect(first.code, first.out).toBe(0);
    expect(first.out).toContain("node worker-1: pod CIDR(s) 10.244.2.0/24,fd00:10:244:2::/64");
    expect(requests).toEqual([{ url: "/api/v1/nodes/worker-1", auth: "Bearer secret-token" }]);
    expect(fs.statSync(path.join(host, "opt/cni/bin/netkit-cni")).mode & 0o777).toBe(0o755);
    const conflist = JSON.parse(fs.readFileSync(path.join(host, "etc/cni/net.d/10-netkit-cni.conflist"), "utf8"));
    expect(conflist.plugins[0]).toMatchObject({
      type: "netkit-cni",
      datapath: "auto",
      clusterCIDRs: ["10.244.0.0/16", "fd00:10:244::/56"],
      ipam: { ranges: [[{ subnet: "10.244.2.0/24" }], [{ subnet: "fd00:10:244:2::/64" }]] },
    });
    // The pod restarts (node reboot, DaemonSet update): nothing changes.
    const again = await run();
    expect(again.code, again.out).toBe(0);
    expect(again.out).toMatch(/unchanged .*netkit-cni\nunchanged .*10-netkit-cni.conflist/);
  });

  it("kind/up.sh installs on every node with its pod CIDR and routes the others' (docker, kind, kubectl stood in)", () => {
    const dir = fx.tempDir("nke2e-kind-");
    const stubs = path.join(dir, "bin");
    fs.mkdirSync(stubs);
    const nodes = {
      "netkit-control-plane": ["10.244.0.0/24", "172.18.0.2"],
      "netkit-worker": ["10.244.1.0/24", "172.18.0.3"],
      "netkit-worker2": ["10.244.2.0/24", "172.18.0.4"],
    };
    // One stub for the three tools: logs each call; `docker cp` copies into a per-node
    // tree; `docker exec <node> /usr/local/bin/netkit-cni install` runs the real executable
    // with the node's paths moved under that tree; kubectl answers from the table above.
    const stub = `#!/bin/bash
set -euo pipefail
root=${JSON.stringify(dir)}
tool=$(basename "$0")
echo "$tool $*" >> "$root/calls.log"
declare -A cidr=(${Object.entries(nodes)
      .map(([n, [c]]) => `[${n}]=${c}`)
      .join(" ")})
declare -A ip=(${Object.entries(nodes)
      .map(([n, [, a]]) => `[${n}]=${a}`)
      .join(" ")})
case "$tool $1" in
  "kind get") if [ "$2" = nodes ]; then printf '%s\\n' ${Object.keys(nodes).join(" ")}; fi ;;
  "kind create") ;;
  "docker cp") node=\${3%%:*}; mkdir -p "$root/nodes/$node/usr/local/bin"; cp "$2" "$root/nodes/$node/usr/local/bin/netkit-cni" ;;
  "docker exec")
    node=$2; shift 2
    if [ "$1" = /usr/local/bin/netkit-cni ]; then
      shift
      args=()
      for a in "$@"; do case $a in /opt/*|/etc/*) args+=("$root/nodes/$node$a") ;; *) args+=("$a") ;; esac; done
      exec "$root/nodes/$node/usr/local/bin/netkit-cni" "\${args[@]}"
    fi
    echo "$node $*" >> "$root/routes.log" ;;
  "kubectl --context")
    shift 2
    case "$1 $2" in
      "get node")
        case "$*" in
          *podCIDR*) printf '%s' "\${cidr[$3]}" ;;
          *InternalIP*) printf '%s' "\${ip[$3]}" ;;
        esac ;;
      "get pod") case "$3" in nk-a) printf 10.244.1.2 ;; nk-b) printf 10.244.2.2 ;; esac ;;
      *) cat > /dev/null || true ;;
    esac ;;
esac
`;
    fs.writeFileSync(path.join(stubs, "stub"), stub, { mode: 0o755 });
    for (const t of ["docker", "kind", "kubectl"]) fs.symlinkSync("stub", path.join(stubs, t));
    const r = spawnSync(path.join(REPO, "install/kind/up.sh"), [], {
      encoding: "utf8",
      env: { PATH: `${stubs}:/usr/sbin:/usr/bin:/sbin:/bin`, NETKIT_CNI_BINARY: PLUGIN_BINARY, HOME: dir },
      timeout: 120_000,
    });
    expect(r.status, `${r.stdout}${r.stderr}`).toBe(0);

    for (const [n, [c]] of Object.entries(nodes)) {
      const conflist = JSON.parse(
        fs.readFileSync(path.join(dir, "nodes", n, "etc/cni/net.d/10-netkit-cni.conflist"), "utf8"),
      );
      expect(conflist.plugins[0]).toMatchObject({
        clusterCIDRs: ["10.244.0.0/16"],
        ipam: { ranges: [[{ subnet: c }]] },
      });
      expect(fs.existsSync(path.join(dir, "nodes", n, "opt/cni/bin/netkit-cni"))).toBe(true);
    }
    const routes = fs.readFileSync(path.join(dir, "routes.log"), "utf8").trim().split("\n").sort();
    const expected = Object.keys(nodes).flatMap((n) =>
      Object.entries(nodes)
        .filter(([m]) => m !== n)
        .map(([, [c, a]]) => `${n} ip route replace ${c} via ${a}`),
    );
    expect(routes).toEqual(expected.sort());
    const calls = fs.readFileSync(path.join(dir, "calls.log"), "utf8");
    expect(calls).toMatch(/kind create cluster --name netkit --config .*install\/kind\/cluster.yaml/);
    expect(calls).toMatch(/kubectl --context kind-netkit exec nk-a -- ping -c 3 -W 2 10\.244\.2\.2/);
    expect(calls).toMatch(/kubectl --context kind-netkit exec nk-b -- ping -c 3 -W 2 10\.244\.1\.2/);
  });
});
