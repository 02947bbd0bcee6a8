/**
 * The applications' servers, from their Debian packages, each started by the bench as a
 * plain foreground process inside a server netns, with its data under the run's own
 * folder on tmpfs: the disk (fsync of PostgreSQL's WAL, etcd's raft log) would otherwise
 * set the pace and hide the network, which is what the comparison is about.
 *
 * PostgreSQL refuses to run as root: it runs as the `postgres` user the package creates,
 * from a data folder made once per run (initdb, then pgbench's tables) and copied per server.
 */
import { execFileSync, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import type { Fixture } from "../../../test/support/harness";
import { onCleanup } from "../cleanup";
import { type Place, sleepMs, startDaemon } from "./exec";

export const PORTS = { nginx: 8080, redis: 6379, postgres: 5432, etcd: 2379, memcached: 11211 } as const;

/** The small page (a default index.html's size) and the 64 KiB one nginx serves. */
export const FILES = { small: "small.html", large: "64k.bin" } as const;
const SMALL_BYTES = 612;
const LARGE_BYTES = 64 * 1024;

const PG_BIN = "/usr/lib/postgresql/15/bin";
/** pgbench's scale: 100,000 accounts, small enough to load in about a second. */
const PG_SCALE = 1;

function pgUser(): { uid: number; gid: number } {
  const line = fs
    .readFileSync("/etc/passwd", "utf8")
    .split("\n")
    .find((l) => l.startsWith("postgres:"));
  if (!line) throw new Error("no postgres user: is postgresql-15 installed (scripts/deps.sh apps)?");
  const [, , uid, gid] = line.split(":");
  return { uid: Number(uid), gid: Number(gid) };
}

const asPostgres = (cmd: string[]) => ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", ...cmd];

const pgServerArgs = (dir: string, listen: string) => [
  `${PG_BIN}/postgres`,
  "-D",
  dir,
  "-c",
  `listen_addresses=${listen}`,
  "-c",
  `port=${PORTS.postgres}`,
  "-c",
  `unix_socket_directories=${dir}`,
  "-c",
  "fsync=off",
  "-c",
  "synchronous_commit=off",
  "-c",
  "full_page_writes=off",
  "-c",
  "shared_buffers=32MB",
  "-c",
  "max_connections=40",
];

/**
 * The run's PostgreSQL data folder with pgbench's tables, made once: initdb, a server on
 * its unix socket only (no netns needed), `pgbench -i`, a fast shutdown.
 */
export function pgTemplate(base: string): string {
  const { uid, gid } = pgUser();
  const dir = path.join(base, "pg-template");
  fs.mkdirSync(dir, { mode: 0o700 });
  fs.chownSync(dir, uid, gid);
  const run = (cmd: string[]) => execFileSync(cmd[0] as string, cmd.slice(1), { stdio: "pipe", timeout: 120_000 });
  run(asPostgres([`${PG_BIN}/initdb`, "-D", dir, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"]));
  // Clients connect from other namespaces' addresses, all made by this run.
  fs.appendFileSync(path.join(dir, "pg_hba.conf"), "host all all 0.0.0.0/0 trust\n");
  // -l: the server must not hold our pipe open, or the call would wait for it to exit.
  const log = path.join(base, "pg-template.log");
  fs.writeFileSync(log, "");
  fs.chownSync(log, uid, gid);
  // Whatever happens next, no server outlives the run.
  onCleanup(() => {
    if (fs.existsSync(path.join(dir, "postmaster.pid"))) {
      spawnSync(
        asPostgres([`${PG_BIN}/pg_ctl`, "-D", dir, "-m", "immediate", "stop"])[0] as string,
        asPostgres([`${PG_BIN}/pg_ctl`, "-D", dir, "-m", "immediate", "stop"]).slice(1),
        { stdio: "ignore" },
      );
    }
  });
  run(
    asPostgres([
      `${PG_BIN}/pg_ctl`,
      "-D",
      dir,
      "-l",
      log,
      "-w",
      "-o",
      pgServerArgs(dir, "''").slice(3).join(" "),
      "start",
    ]),
  );
  try {
    run(["pgbench", "-h", dir, "-U", "postgres", "-i", "-q", "-s", String(PG_SCALE), "postgres"]);
  } finally {
    run(asPostgres([`${PG_BIN}/pg_ctl`, "-D", dir, "-w", "-m", "fast", "stop"]));
  }
  return dir;
}

function nginxConf(dir: string): string {
  return `daemon off;
master_process on;
worker_processes 1;
user root;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  types { text/html html; application/octet-stream bin; }
  server {
    listen ${PORTS.nginx};
    root ${dir}/www;
  }
}
`;
}

export interface ServerSet {
  place: Place;
  ip: string;
  pgDir: string;
}

/**
 * Every application's server in one netns, listening on all of its addresses. `dir` is
 * this server set's own folder; `template` the run's PostgreSQL data folder.
 */
export function startServers(fx: Fixture, place: Place, ip: string, dir: string, template: string): ServerSet {
  fs.mkdirSync(dir, { recursive: true, mode: 0o755 });
  // A runtime brings a pod's loopback up; the CNI plugins do not, and servers use it.
  execFileSync("ip", ["-n", place.netns, "link", "set", "lo", "up"]);
  const sub = (name: string) => {
    const d = path.join(dir, name);
    fs.mkdirSync(d, { recursive: true });
    return d;
  };
  const logOf = (name: string) => path.join(dir, `${name}.log`);

  startNginx(fx, place, sub("nginx"), logOf("nginx"));
  startRedis(fx, place, sub("redis"), logOf("redis"));

  startDaemon(
    fx,
    place,
    ["memcached", "-u", "root", "-l", "0.0.0.0", "-p", String(PORTS.memcached), "-U", "0", "-t", "1", "-m", "64"],
    PORTS.memcached,
    logOf("memcached"),
  );

  const et = sub("etcd");
  startDaemon(
    fx,
    place,
    [
      "etcd",
      "--name",
      "n1",
      "--data-dir",
      et,
      "--listen-client-urls",
      `http://0.0.0.0:${PORTS.etcd}`,
      "--advertise-client-urls",
      `http://${ip}:${PORTS.etcd}`,
      "--listen-peer-urls",
      "http://127.0.0.1:2380",
      "--initial-advertise-peer-urls",
      "http://127.0.0.1:2380",
      "--initial-cluster",
      "n1=http://127.0.0.1:2380",
      "--logger",
      "zap",
      "--log-level",
      "error",
    ],
    PORTS.etcd,
    logOf("etcd"),
  );

  const pg = path.join(dir, "pg");
  execFileSync("cp", ["-a", template, pg]);
  startDaemon(fx, place, asPostgres(pgServerArgs(pg, "0.0.0.0")), PORTS.postgres, logOf("postgres"), "SIGINT");
  // The port listens before recovery ends; wait until it takes connections.
  for (let i = 0; i < 100; i++) {
    try {
      execFileSync("pg_isready", ["-q", "-h", pg, "-p", String(PORTS.postgres)], { stdio: "ignore" });
      break;
    } catch {
      sleepMs(100);
    }
  }
  return { place, ip, pgDir: pg };
}

/** nginx serving FILES from `ng` on PORTS.nginx, in `place`. */
export function startNginx(fx: Fixture, place: Place, ng: string, log: string): void {
  fs.mkdirSync(path.join(ng, "www"), { recursive: true });
  fs.writeFileSync(path.join(ng, "www", FILES.small), "x".repeat(SMALL_BYTES));
  fs.writeFileSync(path.join(ng, "www", FILES.large), Buffer.alloc(LARGE_BYTES, 7));
  fs.writeFileSync(path.join(ng, "nginx.conf"), nginxConf(ng));
  startDaemon(fx, place, ["nginx", "-p", ng, "-e", `${ng}/error.log`, "-c", `${ng}/nginx.conf`], PORTS.nginx, log);
}

/** Redis without persistence on PORTS.redis, its folder `rd`, in `place`. */
export function startRedis(fx: Fixture, place: Place, rd: string, log: string): void {
  fs.mkdirSync(rd, { recursive: true });
  startDaemon(
    fx,
    place,
    [
      "redis-server",
      "--port",
      String(PORTS.redis),
      "--bind",
      "0.0.0.0",
      "--protected-mode",
      "no",
      "--save",
      "",
      "--appendonly",
      "no",
      "--dir",
      rd,
    ],
    PORTS.redis,
    log,
  );
}
