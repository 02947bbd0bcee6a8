/**
 * podman 4.3 with its CNI backend (libcni 1.1.2) runs busybox containers on the plugin:
 * each gets its address, reaches the other container and the node, `network connect`
 * adds a second interface (eth1) and `disconnect` removes it, and once podman has removed
 * the containers (DEL comes from conmon's separate cleanup process) nothing of them is
 * left. podman's storage, runroot, CNI config and cache all live in the sandbox.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Fixture } from "../support/harness";
import { busyboxRootfs, leftovers, NOTHING_LEFT, PLUGIN_BINARY, requireTool, Sandbox } from "./sandbox";

const NODE_V4 = "10.232.0.1";
const NETS = {
  nke2e: { subnet: "10.232.1.0/24" },
  nke2e2: { subnet: "10.232.2.0/24" },
} as const;
const IMAGE = "localhost/nke2e-busybox:latest";

describe("podman (CNI backend) runs containers on netkit-cni", () => {
  let fx: Fixture;
  let sb: Sandbox;
  let node: string;
  let podmanEnv: Record<string, string>;
  let podman: string;

  beforeEach(async () => {
    podman = requireTool("podman");
    requireTool("runc");
    requireTool("conmon");
    fx = new Fixture();
    node = fx.makeNode(NODE_V4, "fd32::1");
    sb = new Sandbox(fx, node);
    await sb.start();
    sb.ownCgroup("libpod_parent");
    const d = (p: string) => path.join(sb.dir, "podman", p);
    for (const p of ["root", "run", "tmp", "static", "volumes"]) fs.mkdirSync(d(p), { recursive: true });
    fs.writeFileSync(
      d("containers.conf"),
      `[containers]
default_ulimits = ["nofile=10000:10000", "nproc=16384:16384"]
log_driver = "k8s-file"

[network]
network_backend = "cni"
cni_plugin_dirs = ["${sb.binDir}"]
network_config_dir = "${sb.confDir}"
default_network = "nke2e"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "none"
lock_type = "file"
tmp_dir = "${d("tmp")}"
static_dir = "${d("static")}"
volume_path = "${d("volumes")}"
image_copy_tmp_dir = "${d("tmp")}"
`,
    );
    fs.writeFileSync(
      d("storage.conf"),
      `[storage]\ndriver = "vfs"\nrunroot = "${d("run")}"\ngraphroot = "${d("root")}"\n`,
    );
    podmanEnv = { CONTAINERS_CONF: d("containers.conf"), CONTAINERS_STORAGE_CONF: d("storage.conf") };
    for (const [name, { subnet }] of Object.entries(NETS)) {
      sb.writeConflist(`10-${name}`, {
        cniVersion: "1.0.0",
        name,
        plugins: [
          {
            type: "netkit-cni",
            datapath: "auto",
            bpffsRoot: fx.bpffsRoot,
            hostInterface: "uplink0",
            clusterCIDRs: [NETS.nke2e.subnet, NETS.nke2e2.subnet],
            logFile: path.join(sb.dir, "plugin.log"),
            logLevel: "debug",
            ipam: { type: "netkit-cni", ranges: [[{ subnet }]], dataDir: path.join(sb.dir, "ipam") },
          },
        ],
      });
    }
  });

  afterEach(() => {
    // podman's own teardown first (so its cleanup runs the plugin's DEL), then the sandbox.
    try {
      sb.run(podman, ["rm", "-a", "-f", "-t", "0"], { env: podmanEnv });
    } finally {
      fx.cleanup();
    }
  });

  const pm = (...args: string[]) => sb.must(podman, args, { env: podmanEnv, timeout: 90_000 }).trim();
  const pmTry = (...args: string[]) => sb.run(podman, args, { env: podmanEnv, timeout: 90_000 });

  // libcni's VERSION call (podman validates every config with it on each start) sets the
  // other variables to "dummy"; a plugin that rejects them is dropped from the network.
  it("answers VERSION as libcni sends it (CNI_NETNS=dummy)", () => {
    const r = spawnSync(PLUGIN_BINARY, [], {
      input: '{"cniVersion":"1.0.0"}',
      env: {
        CNI_COMMAND: "VERSION",
        CNI_CONTAINERID: "dummy",
        CNI_NETNS: "dummy",
        CNI_IFNAME: "dummy",
        CNI_PATH: "/opt/cni/bin",
      },
      encoding: "utf8",
    });
    expect(r.status, r.stdout).toBe(0);
    expect(JSON.parse(r.stdout).supportedVersions).toContain("1.0.0");
  });

  it("containers get addresses, reach each other and the node; removal leaves nothing", async () => {
    const rootfs = busyboxRootfs(fx);
    let t = Date.now();
    pm("import", rootfs.tarball, IMAGE);
    const importMs = Date.now() - t;

    t = Date.now();
    for (const name of ["c1", "c2"]) {
      pm("run", "-d", "--name", name, "--network", "nke2e", "--cap-add", "NET_RAW", IMAGE, "sleep", "600");
    }
    const runMs = (Date.now() - t) / 2;
    const ipOf = (name: string, net = "nke2e") =>
      pm("inspect", name, "--format", `{{.NetworkSettings.Networks.${net}.IPAddress}}`);
    const [ip1, ip2] = [ipOf("c1"), ipOf("c2")];
    const why = () => `${pm("inspect", "c1", "c2")}\n${fs.readFileSync(path.join(sb.dir, "plugin.log"), "utf8")}`;
    if (!ip1 || !ip2) throw new Error(`no address in podman inspect:\n${why()}`);
    expect(ip1).toMatch(/^10\.232\.1\.\d+$/);
    expect(ip2).toMatch(/^10\.232\.1\.\d+$/);
    expect(pm("exec", "c1", "ip", "-4", "-o", "addr", "show", "eth0")).toContain(`${ip1}/32`);

    // One ping each way and to the node; on failure the message carries the container's
    // view (neighbours, routes) to tell a missing route from a dropped packet.
    const reach = (from: string, to: string) => {
      const r = pmTry("exec", from, "ping", "-c1", "-W2", to);
      const diag =
        r.status === 0
          ? ""
          : `${from} -> ${to}: ${r.stdout}${r.stderr}\n${pmTry("exec", from, "ip", "neigh").stdout}${pmTry("exec", from, "ip", "route").stdout}`;
      return { status: r.status, diag };
    };
    for (const [from, to] of [
      ["c1", ip2],
      ["c2", ip1],
      ["c1", NODE_V4],
    ] as const) {
      const r = reach(from, to);
      expect(r.status, r.diag).toBe(0);
    }

    // podman passes its 64-hex container ID and K8S_POD_NAME in CNI_ARGS.
    const id1 = pm("inspect", "c1", "--format", "{{.Id}}");
    expect(id1).toMatch(/^[0-9a-f]{64}$/);
    const log = fs.readFileSync(path.join(sb.dir, "plugin.log"), "utf8");
    expect(log).toContain(`ADD ${id1}/eth0`);

    t = Date.now();
    pm("rm", "-f", "-t", "0", "c1", "c2");
    const rmMs = Date.now() - t;
    // DEL may come from conmon's `podman container cleanup` as well as from rm itself.
    await Sandbox.waitFor("podman's processes to exit", () => sb.processes().length === 1);
    expect(leftovers(node, fx.bpffsRoot, path.join(sb.dir, "ipam", "nke2e"))).toEqual(NOTHING_LEFT);
    const cniCache = path.join(sb.cacheDir, "results");
    expect(fs.existsSync(cniCache) ? fs.readdirSync(cniCache) : []).toEqual([]);
    console.log(`podman: import ${importMs} ms, run ${runMs.toFixed(0)} ms per container, rm of two ${rmMs} ms`);
  });

  it("network connect adds eth1 to a running container, disconnect removes it", async () => {
    pm("import", busyboxRootfs(fx).tarball, IMAGE);
    pm("run", "-d", "--name", "c1", "--network", "nke2e", "--cap-add", "NET_RAW", IMAGE, "sleep", "600");
    pm("run", "-d", "--name", "c2", "--network", "nke2e", "--cap-add", "NET_RAW", IMAGE, "sleep", "600");
    const ipOf = (name: string, net = "nke2e") =>
      pm("inspect", name, "--format", `{{.NetworkSettings.Networks.${net}.IPAddress}}`);
    const connect = pmTry("network", "connect", "nke2e2", "c1");
    expect(connect.status, connect.stderr).toBe(0);
    // A second network on a running container: ADD for eth1, then DEL for it.
    const ip1b = ipOf("c1", "nke2e2");
    expect(ip1b).toMatch(/^10\.232\.2\.\d+$/);
    expect(pm("exec", "c1", "ip", "-4", "-o", "addr", "show", "eth1")).toContain(`${ip1b}/32`);
    expect(pmTry("exec", "c2", "ping", "-c1", "-W2", ip1b).status).toBe(0);
    let left = leftovers(node, fx.bpffsRoot, path.join(sb.dir, "ipam", "nke2e2"));
    expect(left.devices).toHaveLength(3);
    expect(left.pins).toHaveLength(3);
    expect(left.ipFiles).toEqual([ip1b]);
    pm("network", "disconnect", "nke2e2", "c1");
    left = leftovers(node, fx.bpffsRoot, path.join(sb.dir, "ipam", "nke2e2"));
    expect(left.devices).toHaveLength(2);
    expect(left.ipFiles).toEqual([]);

    pm("rm", "-f", "-t", "0", "c1", "c2");
    await Sandbox.waitFor("podman's processes to exit", () => sb.processes().length === 1);
    expect(leftovers(node, fx.bpffsRoot, path.join(sb.dir, "ipam", "nke2e2"))).toEqual(NOTHING_LEFT);
  });
});
