/**
 * The install steps (scripts/apt.sh, behind scripts/deps.sh, test/e2e/setup.sh and
 * test/vm/kernel.sh) on a machine whose apt has never fetched anything. APT_CONFIG points
 * apt's lists, caches and sources at a temporary directory holding only the machine's base
 * Debian release (as a fresh install has it: no backports, no non-free), and DPKG_ADMINDIR
 * at an empty dpkg database, so installs are simulated from nothing (apt-get -s). The
 * machine's own /etc/apt and /var/lib/apt/lists are neither used nor written.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, describe, expect, it } from "vitest";

const APT_SH = path.resolve(__dirname, "../../scripts/apt.sh");
const KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg";
const SCRIPT = "apt-test";

const CODENAME = /^VERSION_CODENAME=(\w+)$/m.exec(fs.readFileSync("/etc/os-release", "utf8"))?.[1] ?? "";
const BACKPORTS = `${CODENAME}-backports`;

/** The mirror the machine's own apt uses for its base release (read without APT_CONFIG). */
function machineMirror(): string {
  const { APT_CONFIG: _, ...env } = process.env;
  const r = spawnSync(
    "apt-get",
    ["indextargets", "--no-release-info", "--format", "$(TARGET_OF) $(RELEASE) $(REPO_URI)"],
    { encoding: "utf8", env },
  );
  const uri = r.stdout
    .split("\n")
    .map((line) => line.split(" "))
    .find(([type, release]) => type === "deb" && release === CODENAME)?.[2];
  if (r.status !== 0 || !uri) throw new Error(`no 'deb ${CODENAME}' source in this machine's apt: ${r.stderr}`);
  return uri.replace(/\/$/, "");
}

const stanza = (type: string, uri: string, suite: string, components: string) =>
  `Types: ${type}\nURIs: ${uri}\nSuites: ${suite}\nComponents: ${components}\nSigned-By: ${KEYRING}\n`;

/** deb822 stanzas as field maps. */
function stanzas(text: string): Record<string, string>[] {
  return text
    .split(/\n\s*\n/)
    .filter((s) => s.trim() !== "")
    .map((s) =>
      Object.fromEntries(
        s
          .trim()
          .split("\n")
          .map((l) => [l.slice(0, l.indexOf(":")), l.slice(l.indexOf(":") + 1).trim()]),
      ),
    );
}

/**
 * Every file under the machine's apt sources and lists, with size and modification time.
 * apt's own lock and partial downloads are left out: they change whenever anyone's apt runs.
 */
function machineAptFiles(): string[] {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name);
      if (p === "/var/lib/apt/lists/lock" || p === "/var/lib/apt/lists/partial") continue;
      if (e.isDirectory()) walk(p);
      else {
        const st = fs.lstatSync(p);
        files.push(`${p} ${st.size} ${st.mtimeMs}`);
      }
    }
  };
  walk("/etc/apt");
  walk("/var/lib/apt/lists");
  return files.sort();
}

/** A port on which nothing listens: a mirror there refuses every connection. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

interface AptState {
  /** Our sources file, where ensure_sources writes: Dir::Etc::sourceparts/netkit-cni.sources. */
  ours: string;
  env: NodeJS.ProcessEnv;
}

describe("install steps from an empty apt state", () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
  });

  /** An apt that knows only the base release at `mirror` and has fetched nothing. */
  function emptyAptState(mirror: string, extraSources = ""): AptState {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nkc-apt-"));
    dirs.push(dir);
    // apt downloads as its sandbox user _apt, which must reach lists/partial below here.
    fs.chmodSync(dir, 0o755);
    for (const d of ["lists/partial", "cache/archives/partial", "sources.list.d", "dpkg"]) {
      fs.mkdirSync(path.join(dir, d), { recursive: true });
    }
    fs.writeFileSync(path.join(dir, "dpkg/status"), "");
    fs.writeFileSync(path.join(dir, "sources.list"), "");
    const parts = path.join(dir, "sources.list.d");
    fs.writeFileSync(path.join(parts, "debian.sources"), stanza("deb", mirror, CODENAME, "main") + extraSources);
    const conf = path.join(dir, "apt.conf");
    fs.writeFileSync(
      conf,
      [
        `Dir::State::lists "${dir}/lists/";`,
        `Dir::State::status "${dir}/dpkg/status";`,
        `Dir::Cache "${dir}/cache/";`,
        `Dir::Etc::sourcelist "${dir}/sources.list";`,
        `Dir::Etc::sourceparts "${parts}/";`,
        // A mirror that refuses connections fails at once rather than after apt's retries.
        `Acquire::Retries "0";`,
        "",
      ].join("\n"),
    );
    return {
      ours: path.join(parts, "netkit-cni.sources"),
      // apt's own words are matched below: untranslated.
      env: { ...process.env, APT_CONFIG: conf, DPKG_ADMINDIR: path.join(dir, "dpkg"), LC_ALL: "C.UTF-8" },
    };
  }

  /** `script` after sourcing apt.sh, in the strict mode its callers run in. */
  function aptSh(state: AptState, script: string) {
    const r = spawnSync("bash", ["-c", `set -euo pipefail\nsource "$APT_SH"\n${script}`, SCRIPT], {
      encoding: "utf8",
      env: { ...state.env, APT_SH },
      timeout: 100_000,
    });
    return { status: r.status, stdout: r.stdout, stderr: r.stderr };
  }

  it("adds backports and non-free from the machine's own mirror, fetches them and installs iproute2 6.x from backports (simulated)", () => {
    const before = machineAptFiles();
    const mirror = machineMirror();
    const state = emptyAptState(mirror);
    const wanted = `ensure_sources deb "${BACKPORTS} main contrib non-free" "${CODENAME} non-free"`;

    const r = aptSh(
      state,
      `${wanted}
      APT_INSTALL_OPTS=-s
      apt_install -t ${BACKPORTS} iproute2
      echo "backports $(candidate -t ${BACKPORTS} iproute2)"
      echo "base $(candidate iproute2)"`,
    );
    expect(r.stderr).not.toContain("failed");
    expect(r.status).toBe(0);
    expect(r.stderr).toContain(`${SCRIPT}: added to ${state.ours}: deb ${BACKPORTS} main contrib non-free;`);
    expect(r.stderr).toContain(`${SCRIPT}: installing iproute2`);

    const written = fs.readFileSync(state.ours, "utf8");
    expect(stanzas(written)).toEqual([
      { Types: "deb", URIs: mirror, Suites: BACKPORTS, Components: "main contrib non-free", "Signed-By": KEYRING },
      { Types: "deb", URIs: mirror, Suites: CODENAME, Components: "non-free", "Signed-By": KEYRING },
    ]);

    const version = (label: string) => new RegExp(`^${label} (\\S+)$`, "m").exec(r.stdout)?.[1] ?? "";
    const [backports, base] = [version("backports"), version("base")];
    expect(base).toMatch(/^6\.1\./);
    expect(backports).toMatch(/^6\.\d+\./);
    const newer = spawnSync("dpkg", ["--compare-versions", backports, "gt", base]);
    expect(newer.status, `${backports} newer than ${base}`).toBe(0);

    // A second run finds everything configured and adds nothing.
    const again = aptSh(state, wanted);
    expect(again).toEqual({ status: 0, stdout: "", stderr: "" });
    expect(fs.readFileSync(state.ours, "utf8")).toBe(written);

    expect(machineAptFiles()).toEqual(before);
  });

  it("a suite the mirror does not have fails, naming the step and with apt's words", () => {
    const before = machineAptFiles();
    const state = emptyAptState(machineMirror());
    const suite = `${CODENAME}-nonexistent`;
    const r = aptSh(
      state,
      `ensure_sources deb "${suite} main"
      APT_INSTALL_OPTS=-s
      apt_install -t ${suite} iproute2`,
    );
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(`${SCRIPT}: step "fetch suite ${suite}" failed: `);
    expect(r.stderr).toContain(`${suite} Release' does not have a Release file`);
    expect(r.stderr).not.toContain("installing");
    expect(machineAptFiles()).toEqual(before);
  });

  it("a mirror that cannot be reached: the suite is added from that mirror, and fetching it fails naming the step", async () => {
    const before = machineAptFiles();
    // Not the machine's mirror: proves the suites come from whatever mirror the sources name.
    const mirror = `http://127.0.0.1:${await closedPort()}/debian`;
    const state = emptyAptState(mirror);
    const r = aptSh(state, `ensure_sources deb "${BACKPORTS} main"\nensure_suite_fetched ${BACKPORTS}`);
    expect(stanzas(fs.readFileSync(state.ours, "utf8"))).toEqual([
      { Types: "deb", URIs: mirror, Suites: BACKPORTS, Components: "main", "Signed-By": KEYRING },
    ]);
    expect(r.status).toBe(1);
    // apt only warns about an unreachable mirror; its warning is the reason given.
    expect(r.stderr).toContain(`${SCRIPT}: step "fetch suite ${BACKPORTS}" failed: W: Failed to fetch ${mirror}/`);
    expect(machineAptFiles()).toEqual(before);
  });

  it("backports configured but never fetched: apt-cache refuses -t for it, and apt_install -t still works", () => {
    const before = machineAptFiles();
    const state = emptyAptState(machineMirror(), `\n${stanza("deb", machineMirror(), BACKPORTS, "main")}`);
    // Why apt.sh fetches a suite before asking for its candidate: the exit status 100 that
    // used to stop `make` inside a discarded $(...) without a word.
    const policy = spawnSync("apt-cache", ["policy", "-t", BACKPORTS, "iproute2"], {
      encoding: "utf8",
      env: state.env,
    });
    expect(policy.status).toBe(100);
    expect(policy.stderr).toContain(`The value '${BACKPORTS}' is invalid for APT::Default-Release`);

    const r = aptSh(state, `APT_INSTALL_OPTS=-s\napt_install -t ${BACKPORTS} iproute2`);
    expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: `${SCRIPT}: installing iproute2\n` });
    expect(machineAptFiles()).toEqual(before);
  });

  it("waits while another apt holds its lock, saying so, then goes on; gives up at its bound naming the step", async () => {
    const before = machineAptFiles();
    // A mirror that refuses connections: the update itself is then over in a moment.
    const state = emptyAptState(`http://127.0.0.1:${await closedPort()}/debian`);
    const lists = path.join(path.dirname(state.env.APT_CONFIG as string), "lists/lock");
    // Another apt: an fcntl lock on the lists lock, as apt itself takes it, held for 6 s.
    const holder = (seconds: number) =>
      `python3 -c 'import fcntl,os,sys,time; f=open(sys.argv[1],"w"); fcntl.lockf(f,fcntl.LOCK_EX); print("held",flush=True); time.sleep(float(sys.argv[2]))' "${lists}" ${seconds}`;
    const started = Date.now();
    const r = aptSh(
      state,
      `${holder(6)} > "${lists}.held" & holder=$!
      until grep -q held "${lists}.held" 2>/dev/null; do sleep 0.1; done
      apt_update "fetch suite ${CODENAME}"
      wait $holder
      echo "updated"`,
    );
    expect(r.stderr).toContain(
      `${SCRIPT}: fetch suite ${CODENAME}: waiting for apt's lock (E: Could not get lock ${lists}`,
    );
    expect(r.status).toBe(0);
    expect(r.stdout).toContain("updated");
    expect(Date.now() - started).toBeGreaterThanOrEqual(5000);

    const bounded = aptSh(
      state,
      `${holder(30)} > "${lists}.held2" & holder=$!
      until grep -q held "${lists}.held2" 2>/dev/null; do sleep 0.1; done
      APT_LOCK_WAIT=5 APT_UPDATED=no apt_update "fetch suite ${BACKPORTS}"; kill $holder`,
    );
    expect(bounded.status).toBe(1);
    expect(bounded.stderr).toContain(
      `${SCRIPT}: step "fetch suite ${BACKPORTS}" failed: gave up after 5s waiting for apt's lock`,
    );
    expect(machineAptFiles()).toEqual(before);
  });

  it("apt-cache itself failing stops the step that asked, with apt's words, never silently", () => {
    const before = machineAptFiles();
    const state = emptyAptState(machineMirror());
    // An apt configuration apt-cache cannot read: every apt-cache call fails with exit 100.
    fs.appendFileSync(state.env.APT_CONFIG as string, 'Junk "at the end"\n');
    const r = aptSh(state, `cand=$(candidate iproute2)\necho "reached with '$cand'"`);
    expect(r.status).toBe(1);
    expect(r.stdout).not.toContain("reached");
    expect(r.stderr).toContain(`${SCRIPT}: step "apt-cache policy iproute2" failed: E: `);
    expect(machineAptFiles()).toEqual(before);
  });
});
