/**
 * `netkit-cni install` on a scratch directory tree: a fresh install writes the executable
 * and a generated conflist; running it again changes nothing (same inodes); another
 * plugin's config of the same name is refused unless --force; a bad --conflist fails
 * before anything is written. Then the upgrade: pods made by cnitool with the installed
 * binary keep working while a new binary is renamed over the old one, and the new one
 * CHECKs and DELs them cleanly.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Fixture, ping } from "../support/harness";
import { cnitoolPath, leftovers, NOTHING_LEFT, PLUGIN_BINARY, Sandbox } from "./sandbox";

interface Report {
  binary: { path: string; action: string; sha256: string };
  conflist: { path: string; action: string };
  found: { file: string; type: string; network: string; dataDir: string; subnets: string[] }[];
  notes: string[];
  warnings: string[];
}

function runInstall(
  binary: string,
  args: string[],
): { status: number | null; stdout: string; stderr: string; report?: Report } {
  const r = spawnSync(binary, ["install", ...args], { encoding: "utf8", timeout: 60_000 });
  let report: Report | undefined;
  try {
    report = args.includes("--json") && r.status === 0 ? (JSON.parse(r.stdout) as Report) : undefined;
  } catch {
    report = undefined;
  }
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, report };
}

const tmpFiles = (dir: string) => fs.readdirSync(dir).filter((f) => f.includes(".tmp"));

describe("netkit-cni install on a scratch tree", () => {
  let fx: Fixture;
  let binDir: string;
  let confDir: string;
  let dirs: string[];

  beforeEach(() => {
    fx = new Fixture();
    const root = fx.tempDir("nke2e-install-");
    binDir = path.join(root, "opt/cni/bin");
    confDir = path.join(root, "etc/cni/net.d");
    dirs = ["--bin-dir", binDir, "--conf-dir", confDir];
  });

  afterEach(() => fx.cleanup());

  const generated = [
    "--pod-cidr",
    "10.244.1.0/24,fd00:10:244:1::/64",
    "--cluster-cidr",
    "10.244.0.0/16",
    "--cluster-cidr",
    "fd00:10:244::/56",
  ];

  it("fresh install, re-install (no change), update of our own config", () => {
    const t0 = Date.now();
    const first = runInstall(PLUGIN_BINARY, [...dirs, ...generated, "--datapath", "veth", "--json"]);
    const installMs = Date.now() - t0;
    expect(first.status, first.stderr).toBe(0);
    expect(first.report?.binary.action).toBe("installed");
    expect(first.report?.conflist.action).toBe("installed");
    const bin = path.join(binDir, "netkit-cni");
    const conf = path.join(confDir, "10-netkit-cni.conflist");
    expect(fs.statSync(bin).mode & 0o777).toBe(0o755);
    expect(fs.statSync(conf).mode & 0o777).toBe(0o644);
    expect(fs.readFileSync(bin).equals(fs.readFileSync(PLUGIN_BINARY))).toBe(true);
    const conflist = JSON.parse(fs.readFileSync(conf, "utf8"));
    expect(conflist).toMatchObject({
      cniVersion: "1.0.0",
      name: "k8s-pod-network",
      plugins: [
        {
          type: "netkit-cni",
          // CRI passes pod annotations (netkit-cni.io/datapath) only to plugins declaring this.
          capabilities: { "io.kubernetes.cri.pod-annotations": true },
          datapath: "veth",
          clusterCIDRs: ["10.244.0.0/16", "fd00:10:244::/56"],
          ipam: { type: "netkit-cni", ranges: [[{ subnet: "10.244.1.0/24" }], [{ subnet: "fd00:10:244:1::/64" }]] },
        },
        { type: "portmap", capabilities: { portMappings: true } },
      ],
    });
    // The installed copy is a working executable.
    expect(spawnSync(bin, ["install", "--help"], { encoding: "utf8" }).stdout).toContain("--pod-cidr");

    const inodes = [fs.statSync(bin).ino, fs.statSync(conf).ino];
    const again = runInstall(PLUGIN_BINARY, [...dirs, ...generated, "--datapath", "veth", "--json"]);
    expect(again.status, again.stderr).toBe(0);
    expect([again.report?.binary.action, again.report?.conflist.action]).toEqual(["unchanged", "unchanged"]);
    expect([fs.statSync(bin).ino, fs.statSync(conf).ino]).toEqual(inodes);

    // Our own config with other settings is ours to update (the DaemonSet re-runs).
    const update = runInstall(PLUGIN_BINARY, [...dirs, ...generated, "--datapath", "auto", "--bandwidth", "--json"]);
    expect(update.report?.conflist.action).toBe("updated");
    expect(update.report?.binary.action).toBe("unchanged");
    // netkit-cni enforces the bandwidth capability itself: --bandwidth chains nothing now.
    const plugins = JSON.parse(fs.readFileSync(conf, "utf8")).plugins as {
      type: string;
      capabilities?: Record<string, boolean>;
    }[];
    expect(plugins.map((p) => p.type)).toEqual(["netkit-cni", "portmap"]);
    expect(plugins[0]?.capabilities).toMatchObject({ bandwidth: true });
    expect(update.report?.warnings.join("\n")).toContain("--bandwidth is no longer needed");
    expect([...tmpFiles(binDir), ...tmpFiles(confDir)]).toEqual([]);
    console.log(
      `install: fresh install of the ${(fs.statSync(bin).size / 1e6).toFixed(0)} MB executable in ${installMs} ms`,
    );
  });

  it("follows no symlink planted at a temporary name: what it points to stays untouched", () => {
    // Every name an install with a pid-derived temporary name could use, for every pid.
    const pidMax = Number(fs.readFileSync("/proc/sys/kernel/pid_max", "utf8"));
    const outside = fx.tempDir("nke2e-victim-");
    const victims = ["netkit-cni", "10-netkit-cni.conflist"].map((name) => {
      const victim = path.join(outside, name);
      fs.writeFileSync(victim, "not yours\n", { mode: 0o600 });
      return victim;
    });
    fs.mkdirSync(binDir, { recursive: true });
    fs.mkdirSync(confDir, { recursive: true });
    const [binVictim, confVictim] = victims as [string, string];
    for (let pid = 1; pid <= pidMax; pid++) {
      fs.symlinkSync(binVictim, path.join(binDir, `.netkit-cni.tmp-${pid}`));
      fs.symlinkSync(confVictim, path.join(confDir, `.10-netkit-cni.conflist.tmp-${pid}`));
    }
    const stamps = victims.map((v) => fs.statSync(v).mtimeMs);

    const r = runInstall(PLUGIN_BINARY, [...dirs, ...generated, "--json"]);
    expect(r.status, r.stderr).toBe(0);
    for (const [i, victim] of victims.entries()) {
      expect(fs.readFileSync(victim, "utf8"), victim).toBe("not yours\n");
      expect(fs.statSync(victim).mtimeMs).toBe(stamps[i]);
    }
    const bin = path.join(binDir, "netkit-cni");
    const conf = path.join(confDir, "10-netkit-cni.conflist");
    expect(fs.lstatSync(bin).isFile()).toBe(true);
    expect(fs.lstatSync(conf).isFile()).toBe(true);
    expect(fs.readFileSync(bin).equals(fs.readFileSync(PLUGIN_BINARY))).toBe(true);
    expect(JSON.parse(fs.readFileSync(conf, "utf8")).plugins[0].type).toBe("netkit-cni");
    // Its own temporary files are gone; the planted ones are left as they were.
    const planted = [...tmpFiles(binDir), ...tmpFiles(confDir)];
    expect(planted).toHaveLength(2 * pidMax);
    expect(planted.every((f) => /\.tmp-\d+$/.test(f))).toBe(true);
  });

  it("refuses another plugin's config unless --force; a bad conflist writes nothing", () => {
    fs.mkdirSync(confDir, { recursive: true });
    const conf = path.join(confDir, "10-netkit-cni.conflist");
    const theirs = `${JSON.stringify({ cniVersion: "1.0.0", name: "cbr0", plugins: [{ type: "bridge" }] })}\n`;
    fs.writeFileSync(conf, theirs);

    const refused = runInstall(PLUGIN_BINARY, [...dirs, ...generated]);
    expect(refused.status).toBe(1);
    expect(refused.stderr).toMatch(/belongs to another plugin; not replaced \(use --force/);
    expect(fs.readFileSync(conf, "utf8")).toBe(theirs);

    const forced = runInstall(PLUGIN_BINARY, [...dirs, ...generated, "--force", "--json"]);
    expect(forced.status, forced.stderr).toBe(0);
    expect(forced.report?.conflist.action).toBe("replaced");
    expect(JSON.parse(fs.readFileSync(conf, "utf8")).plugins[0].type).toBe("netkit-cni");

    // A config that sorts first would win in the runtime: installed, with a warning. (A
    // bridge or ptp one is different: ours is named to sort first, see below.)
    const other = { cniVersion: "1.0.0", name: "mv", plugins: [{ type: "macvlan", master: "eth0" }] };
    fs.writeFileSync(path.join(confDir, "05-other.conflist"), JSON.stringify(other));
    const shadowed = runInstall(PLUGIN_BINARY, [...dirs, ...generated, "--json"]);
    expect(shadowed.report?.warnings.join()).toMatch(/05-other.conflist .* sort before 10-netkit-cni.conflist/);

    // A bad conflist fails before the binary or anything else is written.
    const scratch = fx.tempDir("nke2e-install-bad-");
    const bad = path.join(scratch, "20-bad.conflist");
    for (const [content, msg] of [
      ["{not json", /not valid JSON/],
      [JSON.stringify({ name: "x", plugins: [{ type: "bridge" }] }), /first plugin must be of type "netkit-cni"/],
      [
        JSON.stringify({ cniVersion: "1.0.0", name: "x", plugins: [{ type: "netkit-cni", datapath: "ovs" }] }),
        /"datapath" must be one of/,
      ],
    ] as const) {
      fs.writeFileSync(bad, content);
      const r = runInstall(PLUGIN_BINARY, [
        "--bin-dir",
        path.join(scratch, "bin"),
        "--conf-dir",
        path.join(scratch, "net.d"),
        "--conflist",
        bad,
      ]);
      expect(r.status).toBe(1);
      expect(r.stderr).toMatch(msg);
      expect(fs.existsSync(path.join(scratch, "bin"))).toBe(false);
      expect(fs.existsSync(path.join(scratch, "net.d"))).toBe(false);
    }
    expect(runInstall(PLUGIN_BINARY, [...dirs, "--bogus"]).status).toBe(2);
    expect(runInstall(PLUGIN_BINARY, [...dirs]).stderr).toMatch(/give --pod-cidr/);
  });

  it("recognises a bridge conflist: names it, the network name and store to reuse, and sorts ours first", () => {
    fs.mkdirSync(confDir, { recursive: true });
    const store = fx.tempDir("nke2e-install-store-");
    const bridge = {
      cniVersion: "1.0.0",
      name: "podnet",
      plugins: [
        {
          type: "bridge",
          bridge: "cni0",
          isGateway: true,
          ipam: { type: "host-local", ranges: [[{ subnet: "10.231.90.0/24" }]], dataDir: store },
        },
        { type: "portmap", capabilities: { portMappings: true } },
      ],
    };
    fs.writeFileSync(path.join(confDir, "10-bridge.conflist"), JSON.stringify(bridge));
    const cidr = ["--pod-cidr", "10.231.90.0/24", "--skip-binary"];

    // Without the network's name and store: told exactly which to pass.
    const plain = runInstall(PLUGIN_BINARY, [...dirs, ...cidr]);
    expect(plain.status, plain.stderr).toBe(0);
    expect(plain.stdout).toContain(
      `found 10-bridge.conflist: bridge network "podnet" (on cni0, host-local IPAM, store ${store}, 10.231.90.0/24)`,
    );
    expect(plain.stdout).toContain(
      `warning: to keep addresses disjoint from 10-bridge.conflist's pods and release theirs on DEL, reuse its network name and store: --network-name podnet --data-dir ${store}`,
    );
    expect(plain.stdout).toMatch(/installed .*\/00-netkit-cni\.conflist/);

    // With them: no warning, ours first, the bridge's file untouched.
    const reuse = runInstall(PLUGIN_BINARY, [
      ...dirs,
      ...cidr,
      "--network-name",
      "podnet",
      "--data-dir",
      store,
      "--json",
    ]);
    expect(reuse.status, reuse.stderr).toBe(0);
    const report = reuse.report as Report;
    expect(report.found).toMatchObject([
      { file: "10-bridge.conflist", type: "bridge", network: "podnet", dataDir: store },
    ]);
    expect(report.warnings).toEqual([]);
    expect(report.notes.join("\n")).toContain(`reusing its network name "podnet" and store ${store}`);
    expect(report.notes.join("\n")).toContain("00-netkit-cni.conflist sorts before 10-bridge.conflist");
    expect(report.conflist).toEqual({ path: path.join(confDir, "00-netkit-cni.conflist"), action: "updated" });
    const files = fs
      .readdirSync(confDir)
      .filter((f) => f.endsWith(".conflist"))
      .sort();
    expect(files).toEqual(["00-netkit-cni.conflist", "10-bridge.conflist"]);
    const ours = JSON.parse(fs.readFileSync(path.join(confDir, files[0] as string), "utf8"));
    expect(ours.name).toBe("podnet");
    expect(ours.plugins[0]).toMatchObject({ type: "netkit-cni", ipam: { type: "netkit-cni", dataDir: store } });
    expect(JSON.parse(fs.readFileSync(path.join(confDir, "10-bridge.conflist"), "utf8"))).toEqual(bridge);

    // Once the bridge config is gone, a re-run keeps updating the file runtimes use.
    fs.rmSync(path.join(confDir, "10-bridge.conflist"));
    const later = runInstall(PLUGIN_BINARY, [
      ...dirs,
      ...cidr,
      "--network-name",
      "podnet",
      "--data-dir",
      store,
      "--json",
    ]);
    expect(later.report?.conflist).toEqual({ path: path.join(confDir, "00-netkit-cni.conflist"), action: "unchanged" });
  });

  it("upgrade while pods exist: renamed over, pods undisturbed, the new binary CHECKs and DELs them", async () => {
    const cnitool = cnitoolPath();
    const node = fx.makeNode("10.234.0.1", "fd34::1");
    const sb = new Sandbox(fx, node);
    await sb.start();
    // The sandbox's bin dir (seen outside as sb.dir/opt/cni/bin) gets the binary from install.
    const sbBin = path.join(sb.dir, "opt/cni/bin");
    fs.rmSync(path.join(sbBin, "netkit-cni"));
    const sbConf = path.join(sb.dir, "etc-cni/net.d");
    const dataDir = path.join(sb.dir, "ipam");
    const common = [
      "--bin-dir",
      sbBin,
      "--conf-dir",
      sbConf,
      "--pod-cidr",
      "10.234.1.0/24",
      "--host-interface",
      "uplink0",
      "--data-dir",
      dataDir,
      "--log-file",
      path.join(sb.dir, "plugin.log"),
      "--no-portmap",
      "--json",
    ];
    // bpffsRoot is not an install flag: install a conflist file made from the generated one.
    const first = runInstall(PLUGIN_BINARY, common);
    expect(first.status, first.stderr).toBe(0);
    const conflistPath = path.join(sbConf, "10-netkit-cni.conflist");
    const conflist = JSON.parse(fs.readFileSync(conflistPath, "utf8"));
    conflist.plugins[0].bpffsRoot = fx.bpffsRoot;
    const custom = path.join(sb.dir, "10-netkit-cni.conflist");
    fs.writeFileSync(custom, JSON.stringify(conflist));
    const withRoot = runInstall(PLUGIN_BINARY, [...common.slice(0, 4), "--conflist", custom, "--json"]);
    expect(withRoot.report?.conflist.action).toBe("updated");

    const cni = (verb: string, pod: string) =>
      sb.run(cnitool, [verb, "k8s-pod-network", `/run/netns/${pod}`], {
        env: { NETCONFPATH: sb.confDir, CNI_PATH: sb.binDir, CNI_IFNAME: "eth0" },
      });
    const pods = [fx.makeNetns("nkp"), fx.makeNetns("nkp")];
    const ips = pods.map((pod) => {
      const r = cni("add", pod);
      expect(r.status, r.stderr).toBe(0);
      return (JSON.parse(r.stdout).ips[0].address as string).split("/")[0] as string;
    });
    expect(ping(pods[0] as string, ips[1] as string)).toBe(true);

    // A new build (here: the same program with a different file) renamed over the old one.
    const newBuild = path.join(fx.tempDir("nke2e-newbuild-"), "netkit-cni");
    fs.copyFileSync(PLUGIN_BINARY, newBuild);
    fs.appendFileSync(newBuild, Buffer.alloc(4096));
    fs.chmodSync(newBuild, 0o755);
    const installed = path.join(sbBin, "netkit-cni");
    const oldInode = fs.statSync(installed).ino;
    // An open handle on the old file, like a running invocation's: it keeps its inode.
    const held = fs.openSync(installed, "r");
    const up = runInstall(newBuild, [...common.slice(0, 4), "--conflist", custom, "--json"]);
    expect(up.status, up.stderr).toBe(0);
    expect([up.report?.binary.action, up.report?.conflist.action]).toEqual(["upgraded", "unchanged"]);
    expect(fs.statSync(installed).ino).not.toBe(oldInode);
    expect(fs.fstatSync(held).ino).toBe(oldInode);
    expect(fs.fstatSync(held).nlink).toBe(0);
    fs.closeSync(held);
    expect(fs.readFileSync(installed).equals(fs.readFileSync(newBuild))).toBe(true);

    // The pods did not notice; the new binary checks and removes them.
    expect(ping(pods[1] as string, ips[0] as string)).toBe(true);
    for (const pod of pods) expect(cni("check", pod).status).toBe(0);
    const third = fx.makeNetns("nkp");
    expect(cni("add", third).status).toBe(0);
    for (const pod of [...pods, third]) expect(cni("del", pod).status).toBe(0);
    expect(leftovers(node, fx.bpffsRoot, path.join(dataDir, "k8s-pod-network"))).toEqual(NOTHING_LEFT);
  });
});
