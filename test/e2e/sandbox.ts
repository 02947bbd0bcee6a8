/**
 * What the end-to-end tests need around a real CNI client: a private mount namespace in
 * which the machine's CNI paths (/etc/cni, /opt/cni/bin, /var/lib/cni) are this test's
 * temporary directories, a "node" network namespace the client and the plugin run in,
 * a CNI bin dir holding the reference plugins and the built netkit-cni, and a busybox
 * image. Clients that hard-code their paths (ctr's go-cni reads /etc/cni/net.d and
 * /opt/cni/bin; libcni caches results in /var/lib/cni) therefore never touch the real
 * ones. `cleanup()` ends every process left in the mount namespace (conmon, shims,
 * containers) and removes what the clients left in /run/netns.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { endpointMapEntries, pinnedEndpointDevices } from "../../src/datapath/node-state";
import { BINARY, type Fixture, pluginLinks } from "../support/harness";

const REFERENCE_PLUGINS = "/usr/lib/cni";
/** The executable under test: the build (dist/netkit-cni), or another one (a release). */
export const PLUGIN_BINARY = process.env.NETKIT_CNI_E2E_BINARY ?? BINARY;
const SETUP_HINT = "run test/e2e/setup.sh (as root) first";

/** cnitool as test/e2e/setup.sh builds it, keyed by the libcni source version. */
export function cnitoolPath(): string {
  // biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's format syntax
  const r = spawnSync("dpkg-query", ["-W", "-f=${source:Version}", "golang-github-appc-cni-dev"], { encoding: "utf8" });
  const bin = `/var/cache/netkit-cni/cnitool/${r.stdout.trim()}/cnitool`;
  if (r.status !== 0 || !fs.existsSync(bin)) throw new Error(`cnitool not found at ${bin}: ${SETUP_HINT}`);
  return bin;
}

export function requireTool(tool: string): string {
  for (const dir of ["/usr/bin", "/usr/sbin", "/bin", "/sbin"]) {
    const p = path.join(dir, tool);
    if (fs.existsSync(p)) return p;
  }
  throw new Error(`${tool} not found: ${SETUP_HINT}`);
}

interface RunResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

function mountNsOf(pid: number | string): string | undefined {
  try {
    return fs.readlinkSync(`/proc/${pid}/ns/mnt`);
  } catch {
    return undefined;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class Sandbox {
  /** Everything of this sandbox lives below here; bind-mounted over the real paths. */
  readonly dir: string;
  readonly confDir = "/etc/cni/net.d";
  readonly binDir = "/opt/cni/bin";
  /** libcni's cache (results of ADD, read by CHECK and DEL), as seen from outside. */
  readonly cacheDir: string;
  private holder: ChildProcess | undefined;
  /** /run is a tmpfs of this sandbox's own (start({ privateRun: true })). */
  private privateRun = false;
  private mntNs: string | undefined;
  private mntNsFd: number | undefined;
  private readonly runNetnsBefore: Set<string>;
  private readonly background: ChildProcess[] = [];
  /** cgroup directories (relative to each controller) the runtimes made: removed after. */
  private readonly cgroups: string[] = [];
  /** Runtime state directories outside the sandbox dir (e.g. /run/containerd): removed after. */
  private readonly runDirs: string[] = [];

  constructor(
    fx: Fixture,
    /** The node network namespace every command runs in. */
    readonly node: string,
  ) {
    this.dir = fx.tempDir("nke2e-");
    this.cacheDir = path.join(this.dir, "varlib", "cni");
    for (const d of ["etc-cni/net.d", "opt/cni/bin", "varlib/cni", "tmp"]) {
      fs.mkdirSync(path.join(this.dir, d), { recursive: true });
    }
    for (const f of fs.readdirSync(REFERENCE_PLUGINS)) {
      fs.copyFileSync(path.join(REFERENCE_PLUGINS, f), path.join(this.dir, "opt/cni/bin", f));
    }
    fs.copyFileSync(PLUGIN_BINARY, path.join(this.dir, "opt/cni/bin/netkit-cni"));
    fs.chmodSync(path.join(this.dir, "opt/cni/bin/netkit-cni"), 0o755);
    this.runNetnsBefore = new Set(fs.existsSync("/run/netns") ? fs.readdirSync("/run/netns") : []);
    fx.processes.push({ kill: () => this.cleanup() });
  }

  /**
   * Starts the mount namespace: a `sleep` holding it, the binds made inside. With
   * `privateRun`, /run inside is an empty tmpfs: a runtime whose paths there are fixed
   * (containerd's shims put their sockets in /run/containerd/s whatever the config says;
   * CRI mounts pod netns in /var/run/netns) then shares nothing with the machine's or
   * another test's, and everything it leaves in /run goes with the namespace. Paths
   * given to nsenter are opened outside, so /run/netns/<node> still works for `run`.
   */
  async start(opts: { privateRun?: boolean } = {}): Promise<void> {
    if (!fs.existsSync("/etc/cni")) throw new Error(`/etc/cni missing (podman's package makes it): ${SETUP_HINT}`);
    this.privateRun = opts.privateRun ?? false;
    const script = [
      "set -e",
      `mount --bind "$1/etc-cni" /etc/cni`,
      `mount --bind "$1/opt" /opt`,
      `mount --bind "$1/varlib" /var/lib`,
      ...(this.privateRun ? ["mount -t tmpfs -o mode=0755 nke2e-run /run"] : []),
      "echo ready",
      "exec sleep infinity",
    ].join("\n");
    // Slave propagation: namespaces the test adds later (ip netns add) still show up
    // inside; nothing mounted inside (binds, podman's netns and rootfs mounts) leaks out.
    const holder = spawn("unshare", ["--mount", "--propagation", "slave", "--", "sh", "-c", script, "sh", this.dir], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.holder = holder;
    let stderr = "";
    holder.stderr?.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`sandbox did not start: ${stderr}`)), 10_000);
      holder.stdout?.once("data", () => {
        clearTimeout(timer);
        resolve();
      });
      holder.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`sandbox exited with ${code}: ${stderr}`));
      });
    });
    // Holding the namespace open keeps its inode number from being handed to another
    // namespace (another test's sandbox, a container) while cleanup matches by it.
    this.mntNsFd = fs.openSync(`/proc/${holder.pid}/ns/mnt`, "r");
    this.mntNs = `mnt:[${fs.fstatSync(this.mntNsFd).ino}]`;
    if (mountNsOf(holder.pid as number) !== this.mntNs) throw new Error("sandbox namespace changed under us");
  }

  /** The sandbox's mount namespace, for nsenter --mount. */
  get mountNsPath(): string {
    if (!this.holder?.pid) throw new Error("sandbox not started");
    return `/proc/${this.holder.pid}/ns/mnt`;
  }

  private nsenterArgs(cmd: string, args: string[]): string[] {
    if (!this.holder?.pid) throw new Error("sandbox not started");
    return [`--mount=/proc/${this.holder.pid}/ns/mnt`, `--net=/run/netns/${this.node}`, cmd, ...args];
  }

  /** Runs a command inside the sandbox (its mount namespace, the node's netns). */
  run(
    cmd: string,
    args: string[],
    opts: { env?: Record<string, string>; input?: string; timeout?: number } = {},
  ): RunResult {
    const r = spawnSync("nsenter", this.nsenterArgs(cmd, args), {
      encoding: "utf8",
      env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", HOME: "/root", TMPDIR: path.join(this.dir, "tmp"), ...opts.env },
      input: opts.input,
      timeout: opts.timeout ?? 60_000,
      maxBuffer: 16 << 20,
    });
    const why = `${r.error ? String(r.error) : ""}${r.signal ? `killed by ${r.signal}` : ""}`;
    return { status: r.status, stdout: r.stdout ?? "", stderr: `${r.stderr ?? ""}${why}` };
  }

  /** `run`, throwing with the command's output when it fails. */
  must(
    cmd: string,
    args: string[],
    opts: { env?: Record<string, string>; input?: string; timeout?: number } = {},
  ): string {
    const r = this.run(cmd, args, opts);
    if (r.status !== 0) {
      throw new Error(`${path.basename(cmd)} ${args.join(" ")} exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
    }
    return r.stdout;
  }

  /** Starts a long-running command inside the sandbox; ended by `cleanup()` at the latest. */
  spawn(cmd: string, args: string[], env: Record<string, string> = {}): ChildProcess & { output: () => string } {
    const child = spawn("nsenter", this.nsenterArgs(cmd, args), {
      env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", HOME: "/root", TMPDIR: path.join(this.dir, "tmp"), ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
    });
    child.stderr?.on("data", (d: Buffer) => {
      out += d.toString();
    });
    this.background.push(child);
    return Object.assign(child, { output: () => out });
  }

  writeConflist(name: string, conflist: unknown): string {
    const file = path.join(this.dir, "etc-cni/net.d", `${name}.conflist`);
    fs.writeFileSync(file, `${JSON.stringify(conflist, null, 2)}\n`);
    return file;
  }

  /**
   * Registers a cgroup path (e.g. "libpod_parent") the runtime will create under each
   * controller; cleanup removes it (deepest first, only empty cgroups can go) unless it
   * existed before.
   */
  ownCgroup(relative: string): void {
    if (!cgroupDirs(relative).some((d) => fs.existsSync(d))) this.cgroups.push(relative);
  }

  /** Registers a directory a runtime will create outside the sandbox dir (socket dirs). */
  ownRunDir(dir: string): void {
    if (!fs.existsSync(dir)) this.runDirs.push(dir);
  }

  /** Processes in this sandbox's mount namespace, the holder included. */
  processes(): number[] {
    if (!this.mntNs) return [];
    return fs
      .readdirSync("/proc")
      .filter((p) => /^\d+$/.test(p))
      .map(Number)
      .filter((pid) => mountNsOf(pid) === this.mntNs);
  }

  /** Processes in the cgroups the runtimes made for this test (containers, `runc init`). */
  containerProcesses(): number[] {
    const pids = new Set<number>();
    for (const rel of this.cgroups)
      for (const dir of cgroupDirs(rel)) for (const pid of cgroupProcs(dir)) pids.add(pid);
    return [...pids];
  }

  /**
   * Ends every process left in the namespace (the runtimes should have stopped theirs:
   * tests check that first), then the holder; removes netns files clients left in
   * /run/netns (their bind mounts lived inside and went with the namespace).
   */
  cleanup(): void {
    // Netns files a client bind-mounted inside (podman's /run/netns/netns-<uuid>): the
    // mounts go with the namespace, the empty files stay; only ours are removed.
    const ours = this.privateRun ? [] : this.netnsMountsInside();
    for (const child of this.background.splice(0)) if (child.exitCode === null) child.kill("SIGKILL");
    for (let round = 0; round < 50; round++) {
      // Containers live in mount namespaces of their own: found by their cgroups.
      const pids = [...this.processes(), ...this.containerProcesses()];
      if (pids.length === 0) break;
      for (const pid of pids) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // already gone
        }
      }
      spawnSync("sleep", ["0.1"]);
    }
    this.holder = undefined;
    this.mntNs = undefined;
    if (this.mntNsFd !== undefined) fs.closeSync(this.mntNsFd);
    this.mntNsFd = undefined;
    for (const rel of this.cgroups.splice(0)) {
      for (const dir of cgroupDirs(rel)) removeCgroupTree(dir);
    }
    for (const dir of this.runDirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
    for (const file of ours) removeNetnsFile(file);
  }

  /** Mount points under /run/netns that exist in the sandbox but not outside it. */
  private netnsMountsInside(): string[] {
    if (!this.holder?.pid) return [];
    const points = (file: string) => {
      try {
        return fs
          .readFileSync(file, "utf8")
          .split("\n")
          .map((l) => l.split(" ")[4] ?? "")
          .filter((p) => p.startsWith("/run/netns/"));
      } catch {
        return [];
      }
    };
    const outside = new Set(points("/proc/self/mountinfo"));
    return points(`/proc/${this.holder.pid}/mountinfo`).filter(
      (p) => !outside.has(p) && !this.runNetnsBefore.has(path.basename(p)),
    );
  }

  /** Waits until `fn` holds, polling (runtimes tear down in background processes). */
  static async waitFor(what: string, fn: () => boolean, timeoutMs = 15_000): Promise<void> {
    const end = Date.now() + timeoutMs;
    while (!fn()) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await sleep(100);
    }
  }
}

const CGROUP_ROOT = "/sys/fs/cgroup";

/** `relative` under every mounted controller (v1 hierarchies, unified, or v2 alone). */
function cgroupDirs(relative: string): string[] {
  const roots = [CGROUP_ROOT];
  for (const e of fs.readdirSync(CGROUP_ROOT, { withFileTypes: true })) {
    if (e.isDirectory() && !fs.existsSync(path.join(CGROUP_ROOT, "cgroup.procs")))
      roots.push(path.join(CGROUP_ROOT, e.name));
  }
  return roots.map((r) => path.join(r, relative));
}

function cgroupProcs(dir: string): number[] {
  const pids: number[] = [];
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
    for (const line of fs.readFileSync(path.join(dir, "cgroup.procs"), "utf8").split("\n")) {
      if (line) pids.push(Number(line));
    }
  } catch {
    return pids;
  }
  for (const e of entries) if (e.isDirectory()) pids.push(...cgroupProcs(path.join(dir, e.name)));
  return pids;
}

function removeCgroupTree(dir: string): void {
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return;
  }
  for (const e of entries) if (e.isDirectory()) removeCgroupTree(path.join(dir, e.name));
  try {
    fs.rmdirSync(dir);
  } catch {
    // still has processes (should not happen after cleanup killed them) or already gone
  }
}

/**
 * A root file system holding a static busybox and its applets (sh, ping, nc, ip,
 * httpd, sleep, ...), as a directory (for `ctr run --rootfs`) and a tarball (for
 * `podman import`).
 */
export function busyboxRootfs(fx: Fixture): { dir: string; tarball: string } {
  const busybox = "/bin/busybox";
  const check = spawnSync("file", ["-L", busybox], { encoding: "utf8" });
  if (!fs.existsSync(busybox) || (check.status === 0 && !/statically linked|static-pie/.test(check.stdout))) {
    throw new Error(`a static ${busybox} is needed (busybox-static): ${SETUP_HINT}`);
  }
  const base = fx.tempDir("nke2e-rootfs-");
  const dir = path.join(base, "rootfs");
  for (const d of ["bin", "proc", "sys", "dev", "etc", "tmp", "var/www"])
    fs.mkdirSync(path.join(dir, d), { recursive: true });
  fs.copyFileSync(busybox, path.join(dir, "bin/busybox"));
  fs.chmodSync(path.join(dir, "bin/busybox"), 0o755);
  const applets = execFileSync(busybox, ["--list"], { encoding: "utf8" }).split("\n").filter(Boolean);
  for (const a of applets) if (a !== "busybox") fs.symlinkSync("busybox", path.join(dir, "bin", a));
  fs.writeFileSync(path.join(dir, "etc/passwd"), "root:x:0:0:root:/:/bin/sh\n");
  fs.writeFileSync(path.join(dir, "etc/group"), "root:x:0:\n");
  fs.writeFileSync(path.join(dir, "var/www/index.html"), "hello from the pod\n");
  const tarball = path.join(base, "busybox.tar");
  execFileSync("tar", ["-C", dir, "-cf", tarball, "."]);
  return { dir, tarball };
}

/** What is left of the plugin's work in a node: the "nothing of it is left" check. */
interface Leftovers {
  devices: string[];
  pins: string[];
  mapEntries: string[];
  ipFiles: string[];
}

export function leftovers(node: string, bpffsRoot: string, ipamDir: string): Leftovers {
  const ipFiles = fs.existsSync(ipamDir)
    ? fs.readdirSync(ipamDir).filter((f) => /^[0-9a-f.:]+$/i.test(f) && /[.:]/.test(f))
    : [];
  return {
    devices: pluginLinks(node),
    pins: pinnedEndpointDevices(bpffsRoot),
    mapEntries: [...endpointMapEntries(bpffsRoot).keys()],
    ipFiles,
  };
}

export const NOTHING_LEFT: Leftovers = { devices: [], pins: [], mapEntries: [], ipFiles: [] };

/**
 * Removes a netns file a client left in /run/netns. Its bind mount lived in the sandbox's
 * mount namespace, yet once in a `make test` run the file was still a mount point here
 * when the sandbox had been torn down, and unlink said EBUSY (cnitool's test): then the
 * mount is detached first, and the file goes.
 */
function removeNetnsFile(file: string): void {
  try {
    fs.rmSync(file, { force: true });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EBUSY") throw e;
    spawnSync("umount", ["--lazy", file]);
    fs.rmSync(file, { force: true });
  }
}
