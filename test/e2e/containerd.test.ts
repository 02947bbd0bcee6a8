/**
 * containerd 1.6 with `ctr run --cni` (go-cni over libcni 1.1.2): ctr reads the conflist
 * from /etc/cni/net.d and plugins from /opt/cni/bin (fixed paths: the sandbox's), sends
 * ADD with CNI_NETNS=/proc/<pid>/ns/net and, once the task has exited, DEL with an empty
 * CNI_NETNS. The test runs its own containerd (config, root, state and socket in a temp
 * dir), two busybox containers that reach each other and the node, and checks that after
 * the containers are gone nothing of them is left.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Fixture } from "../support/harness";
import { busyboxRootfs, leftovers, NOTHING_LEFT, requireTool, Sandbox } from "./sandbox";

const NODE_V4 = "10.233.0.1";
const SUBNET4 = "10.233.1.0/24";
const NAMESPACE = "nke2e";

describe("containerd (ctr run --cni) runs containers on netkit-cni", () => {
  let fx: Fixture;
  let sb: Sandbox;
  let node: string;
  let ctrd: string;
  let address: string;
  let daemon: ReturnType<Sandbox["spawn"]> | undefined;
  let ctr: string;

  beforeEach(async () => {
    ctr = requireTool("ctr");
    const containerd = requireTool("containerd");
    requireTool("containerd-shim-runc-v2");
    requireTool("runc");
    fx = new Fixture();
    node = fx.makeNode(NODE_V4, "fd33::1");
    sb = new Sandbox(fx, node);
    await sb.start();
    sb.ownCgroup(NAMESPACE);
    // The runc v2 shim puts its sockets in /run/containerd/s whatever the config says.
    sb.ownRunDir("/run/containerd");
    ctrd = path.join(sb.dir, "containerd");
    for (const d of ["root", "state", "fifo"]) fs.mkdirSync(path.join(ctrd, d), { recursive: true });
    address = path.join(ctrd, "containerd.sock");
    fs.writeFileSync(
      path.join(ctrd, "config.toml"),
      `version = 2
root = "${ctrd}/root"
state = "${ctrd}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "${address}"

[ttrpc]
  address = "${ctrd}/containerd.sock.ttrpc"
`,
    );
    sb.writeConflist("10-nke2e", {
      cniVersion: "1.0.0",
      name: "nke2e",
      plugins: [
        {
          type: "netkit-cni",
          datapath: "auto",
          bpffsRoot: fx.bpffsRoot,
          hostInterface: "uplink0",
          clusterCIDRs: [SUBNET4],
          logFile: path.join(sb.dir, "plugin.log"),
          logLevel: "debug",
          ipam: { type: "netkit-cni", ranges: [[{ subnet: SUBNET4 }]], dataDir: path.join(sb.dir, "ipam") },
        },
      ],
    });
    daemon = sb.spawn(containerd, ["--config", path.join(ctrd, "config.toml")]);
    await Sandbox.waitFor("containerd's socket", () => fs.existsSync(address) && ctrOk("version"), 20_000);
  });

  afterEach(async () => {
    try {
      if (daemon && daemon.exitCode === null) {
        daemon.kill("SIGTERM");
        await Sandbox.waitFor(
          "containerd to stop",
          () => daemon?.exitCode !== null || daemon?.signalCode !== null,
          10_000,
        ).catch(() => undefined);
      }
    } finally {
      daemon = undefined;
      fx.cleanup();
    }
  });

  const ctrArgs = (...args: string[]) => ["--address", address, "--namespace", NAMESPACE, ...args];
  const ctrOk = (...args: string[]) => sb.run(ctr, ctrArgs(...args), { timeout: 30_000 }).status === 0;
  const ctrMust = (...args: string[]) => sb.must(ctr, ctrArgs(...args), { timeout: 30_000 });
  // runc resolves a bare command name before the process's PATH applies: absolute paths.
  const exec = (id: string, ...cmd: string[]) =>
    sb.run(
      ctr,
      ctrArgs(
        "task",
        "exec",
        "--fifo-dir",
        path.join(ctrd, "fifo"),
        "--exec-id",
        `x${Date.now()}`,
        id,
        `/bin/${cmd[0]}`,
        ...cmd.slice(1),
      ),
      {
        timeout: 30_000,
      },
    );

  it("containers get addresses, reach each other and the node; after they exit nothing is left", async () => {
    const rootfs = busyboxRootfs(fx);
    const runs = new Map<string, ReturnType<Sandbox["spawn"]>>();
    const t0 = Date.now();
    for (const id of ["c1", "c2"]) {
      // Not detached: ctr itself tears the network down (DEL, empty CNI_NETNS) when the task exits.
      runs.set(
        id,
        sb.spawn(
          ctr,
          ctrArgs(
            "run",
            "--rm",
            "--cni",
            "--null-io",
            "--fifo-dir",
            path.join(ctrd, "fifo"),
            "--rootfs",
            rootfs.dir,
            id,
            "/bin/sleep",
            "600",
          ),
        ),
      );
    }
    await Sandbox.waitFor(
      "both tasks to run",
      // RUNNING, not just CREATED: ctr starts the task only after the CNI ADD returned
      // (exec already works on a created task, before the network is there).
      () => {
        const tasks = sb.run(ctr, ctrArgs("task", "ls")).stdout;
        return ["c1", "c2"].every((id) => new RegExp(`^${id}\\s+\\d+\\s+RUNNING`, "m").test(tasks));
      },
      30_000,
    ).catch((e: Error) => {
      const last = exec("c1", "true");
      throw new Error(
        `${e.message}\n${[...runs].map(([id, r]) => `${id}: ${r.output()}`).join("\n")}\nexec: ${last.stderr}`,
      );
    });
    const startMs = Date.now() - t0;

    // The task's netns, seen from outside (ctr exec's output is not reliable to capture).
    const pidOf = (id: string) =>
      ctrMust("task", "ls")
        .split("\n")
        .find((l) => l.startsWith(`${id} `))
        ?.split(/\s+/)[1];
    const ipOf = (id: string) =>
      /inet (\d+\.\d+\.\d+\.\d+)\/32/.exec(
        sb.must("nsenter", [`--net=/proc/${pidOf(id)}/ns/net`, "ip", "-4", "-o", "addr", "show", "eth0"]),
      )?.[1];
    let ip1: string | undefined;
    let ip2: string | undefined;
    try {
      [ip1, ip2] = [ipOf("c1"), ipOf("c2")];
    } catch (e) {
      const log = fs.readFileSync(path.join(sb.dir, "plugin.log"), "utf8");
      throw new Error(
        `${(e as Error).message}\n${ctrMust("task", "ls")}\n${[...runs].map(([id, r]) => `${id}: ${r.output()}`).join("\n")}\n${log}`,
      );
    }
    expect(ip1).toMatch(/^10\.233\.1\.\d+$/);
    expect(ip2).toMatch(/^10\.233\.1\.\d+$/);
    expect(exec("c1", "ping", "-c1", "-W2", ip2 as string).status).toBe(0);
    expect(exec("c2", "ping", "-c1", "-W2", ip1 as string).status).toBe(0);
    expect(exec("c1", "ping", "-c1", "-W2", NODE_V4).status).toBe(0);

    // ADD came with the task's /proc/<pid>/ns/net.
    const log = fs.readFileSync(path.join(sb.dir, "plugin.log"), "utf8");
    expect(log).toMatch(/netns=\/proc\/\d+\/ns\/net/);
    let left = leftovers(node, fx.bpffsRoot, path.join(sb.dir, "ipam", "nke2e"));
    expect(left.devices).toHaveLength(2);
    expect(left.mapEntries.sort()).toEqual([ip1, ip2].sort());

    const t1 = Date.now();
    for (const id of ["c1", "c2"]) ctrMust("task", "kill", "-s", "SIGKILL", id);
    await Sandbox.waitFor("ctr run to finish (DEL, task and container removal)", () =>
      [...runs.values()].every((r) => r.exitCode !== null || r.signalCode !== null),
    );
    const stopMs = Date.now() - t1;
    for (const [id, r] of runs) expect(r.output(), id).not.toMatch(/network review|level=error/);
    expect(ctrMust("containers", "ls", "-q").trim()).toBe("");
    // DEL arrived with an empty CNI_NETNS (the task and its namespace were gone).
    const dels = fs
      .readFileSync(path.join(sb.dir, "plugin.log"), "utf8")
      .split("\n")
      .filter((l) => /DEL .*netns= /.test(`${l} `));
    expect(dels.length).toBeGreaterThanOrEqual(2);
    left = leftovers(node, fx.bpffsRoot, path.join(sb.dir, "ipam", "nke2e"));
    expect(left).toEqual(NOTHING_LEFT);
    const cniCache = path.join(sb.cacheDir, "results");
    expect(fs.existsSync(cniCache) ? fs.readdirSync(cniCache) : []).toEqual([]);
    console.log(`containerd: two tasks up and networked in ${startMs} ms; killed and cleaned in ${stopMs} ms`);
  });
});
