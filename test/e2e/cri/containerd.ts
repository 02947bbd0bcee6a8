/**
 * containerd with its CRI plugin as kubelet's runtime, private to a test: root, state,
 * sockets and config in a temp dir, run inside a Sandbox (its mount namespace with a
 * private /run, the node's network namespace), the CRI plugin pointed at the sandbox's
 * CNI directories. The pause image is built here, offline: a static binary compiled from
 * pause.c, packed as an OCI image layout and imported with `ctr images import` into the
 * k8s.io namespace, the one CRI uses.
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import type { Fixture } from "../../support/harness";
import { requireTool, Sandbox } from "../sandbox";
import { CriClient } from "./client";

const PAUSE_IMAGE = "nke2e.local/pause:1";
/** The containerd namespace the CRI plugin keeps its pods and images in (fixed). */
const CRI_NAMESPACE = "k8s.io";

const GO_ARCH: Record<string, string> = { x64: "amd64", arm64: "arm64" };

/** Compiles pause.c statically and packs it as an OCI image archive; returns the tarball. */
export function buildPauseImage(fx: Fixture): string {
  const dir = fx.tempDir("nke2e-pause-");
  const rootfs = path.join(dir, "rootfs");
  const layout = path.join(dir, "layout");
  fs.mkdirSync(rootfs);
  fs.mkdirSync(path.join(layout, "blobs", "sha256"), { recursive: true });
  const cc = spawnSync(
    requireTool("clang"),
    ["-static", "-O2", "-o", path.join(rootfs, "pause"), path.join(__dirname, "pause.c")],
    {
      encoding: "utf8",
    },
  );
  if (cc.status !== 0) throw new Error(`compiling pause.c failed (clang -static needs libc6-dev):\n${cc.stderr}`);

  const blob = (data: Buffer | string) => {
    const buf = Buffer.from(data);
    const digest = `sha256:${createHash("sha256").update(buf).digest("hex")}`;
    fs.writeFileSync(path.join(layout, "blobs", "sha256", digest.slice(7)), buf);
    return { digest, size: buf.length };
  };
  const layerTar = path.join(dir, "layer.tar");
  const tar = spawnSync(
    "tar",
    ["--owner=0", "--group=0", "--numeric-owner", "--mtime=@0", "-C", rootfs, "-cf", layerTar, "pause"],
    { encoding: "utf8" },
  );
  if (tar.status !== 0) throw new Error(`tar: ${tar.stderr}`);
  // An uncompressed layer: its digest is also its diff id.
  const layer = blob(fs.readFileSync(layerTar));
  const architecture = GO_ARCH[process.arch] ?? process.arch;
  const config = blob(
    JSON.stringify({
      architecture,
      os: "linux",
      config: { Entrypoint: ["/pause"] },
      rootfs: { type: "layers", diff_ids: [layer.digest] },
    }),
  );
  const manifest = blob(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: { mediaType: "application/vnd.oci.image.config.v1+json", ...config },
      layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar", ...layer }],
    }),
  );
  fs.writeFileSync(path.join(layout, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  fs.writeFileSync(
    path.join(layout, "index.json"),
    JSON.stringify({
      schemaVersion: 2,
      manifests: [
        {
          mediaType: "application/vnd.oci.image.manifest.v1+json",
          ...manifest,
          platform: { architecture, os: "linux" },
          annotations: { "io.containerd.image.name": PAUSE_IMAGE, "org.opencontainers.image.ref.name": "1" },
        },
      ],
    }),
  );
  const archive = path.join(dir, "pause.tar");
  const pack = spawnSync("tar", ["-C", layout, "-cf", archive, "."], { encoding: "utf8" });
  if (pack.status !== 0) throw new Error(`tar: ${pack.stderr}`);
  return archive;
}

interface CriContainerdOptions {
  /** The CNI plugin and config directories CRI reads (bin_dir, conf_dir). */
  binDir: string;
  confDir: string;
  pauseImage: string;
}

export class CriContainerd {
  readonly dir: string;
  readonly socket: string;
  readonly client: CriClient;
  private daemon: ReturnType<Sandbox["spawn"]> | undefined;
  private readonly containerd = requireTool("containerd");
  private readonly ctr = requireTool("ctr");
  private imported = false;
  /** Output of every containerd run so far, for failure messages. */
  private pastOutput = "";

  constructor(
    fx: Fixture,
    readonly sb: Sandbox,
    private readonly opts: CriContainerdOptions,
  ) {
    requireTool("containerd-shim-runc-v2");
    requireTool("runc");
    this.dir = path.join(sb.dir, "containerd");
    for (const d of ["root", "state", "opt"]) fs.mkdirSync(path.join(this.dir, d), { recursive: true });
    this.socket = path.join(this.dir, "containerd.sock");
    fs.writeFileSync(path.join(this.dir, "config.toml"), this.config());
    this.client = new CriClient(this.socket);
    fx.processes.push({ kill: () => this.client.close() });
  }

  private config(): string {
    const cri = `plugins."io.containerd.grpc.v1.cri"`;
    return `version = 2
root = "${this.dir}/root"
state = "${this.dir}/state"

[grpc]
  address = "${this.socket}"

[ttrpc]
  address = "${this.socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "${this.dir}/opt"

[${cri}]
  sandbox_image = "${PAUSE_IMAGE}"
  # Lowering oom_score_adj is refused on this kind of machine: CRI then gives sandboxes
  # the lowest score it may set instead of -998.
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"

[${cri}.cni]
  bin_dir = "${this.opts.binDir}"
  conf_dir = "${this.opts.confDir}"
  max_conf_num = 1

[${cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[${cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[${cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
`;
  }

  output(): string {
    return `${this.pastOutput}${this.daemon?.output() ?? ""}`;
  }

  /** Starts containerd; returns once CRI reports its network ready (conflist loaded). */
  async start(): Promise<void> {
    if (this.daemon) throw new Error("containerd already running");
    this.daemon = this.sb.spawn(this.containerd, ["--config", path.join(this.dir, "config.toml")]);
    const daemon = this.daemon;
    const alive = () => {
      if (daemon.exitCode !== null || daemon.signalCode !== null)
        throw new Error(`containerd exited: ${this.output()}`);
    };
    let versionOk = false;
    await Sandbox.waitFor(
      "containerd's CRI socket",
      () => {
        alive();
        if (!fs.existsSync(this.socket)) return false;
        const r = this.ctrRun("version");
        return r.status === 0;
      },
      60_000,
    );
    await waitAsync("CRI to answer Version", 60_000, async () => {
      alive();
      versionOk = await this.client.version(5_000).then(
        () => true,
        () => false,
      );
      return versionOk;
    });
    if (!this.imported) {
      const r = this.ctrRun("images", "import", "--snapshotter", "overlayfs", this.opts.pauseImage);
      if (r.status !== 0) throw new Error(`ctr images import: ${r.stdout}${r.stderr}`);
      this.imported = true;
    }
    await waitAsync("CRI to know the pause image", 60_000, async () => {
      alive();
      return (await this.client.imageId(PAUSE_IMAGE).catch(() => undefined)) !== undefined;
    });
    await waitAsync("CRI's network to be ready (conflist loaded)", 60_000, async () => {
      alive();
      const conditions = await this.client.conditions().catch(() => []);
      return conditions.some((c) => c.type === "NetworkReady" && c.status);
    });
  }

  private ctrRun(...args: string[]) {
    return this.sb.run(this.ctr, ["--address", this.socket, "--namespace", CRI_NAMESPACE, ...args], {
      timeout: 60_000,
    });
  }

  /** Ends containerd with `signal` (SIGKILL: a crash); shims and pods stay. */
  async kill(signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
    const daemon = this.daemon;
    if (!daemon) return;
    this.daemon = undefined;
    this.pastOutput += daemon.output();
    if (daemon.exitCode === null && daemon.signalCode === null) {
      daemon.kill(signal);
      await Sandbox.waitFor("containerd to exit", () => daemon.exitCode !== null || daemon.signalCode !== null, 30_000);
    }
  }
}

async function waitAsync(what: string, timeoutMs: number, fn: () => Promise<boolean>): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
