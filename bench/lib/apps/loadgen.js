#!/usr/bin/env node
// A small closed-loop load client for the two applications whose Debian packages ship no
// time-bounded benchmark tool: memcached (text protocol; 90% get, 10% set of 100 B values
// over 100 keys) and etcd (put then range of one key, through etcd's JSON gateway: v3 API,
// one HTTP/1.1 keep-alive connection per worker). Each worker has one request in flight.
//
//   node loadgen.js memcached|etcd HOST PORT SECONDS CONCURRENCY
//
// Prints one JSON line: completed operations, their rate, and latency percentiles (ms) per op.
"use strict";
const net = require("node:net");
const http = require("node:http");

const [mode, host, portText, secondsText, concText] = process.argv.slice(2);
const port = Number(portText);
const seconds = Number(secondsText);
const concurrency = Number(concText);
const KEYS = 100;
const VALUE = "v".repeat(100);
const lat = {};
let errors = 0;
let firstError = "";
const deadline = () => process.hrtime.bigint() >= end;
let end = 0n;

function record(op, t0) {
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  const a = lat[op] ?? [];
  lat[op] = a;
  a.push(ms);
}

function fail(e) {
  errors++;
  if (!firstError) firstError = String(e?.message ? e.message : e);
}

function memcachedWorker() {
  return new Promise((resolve) => {
    const sock = net.connect({ host, port, noDelay: true });
    let buf = "";
    let pending = null;
    sock.setEncoding("latin1");
    sock.on("data", (d) => {
      buf += d;
      if (pending?.done(buf)) {
        const p = pending;
        pending = null;
        buf = "";
        p.resolve();
      }
    });
    sock.on("error", (e) => {
      fail(e);
      resolve();
    });
    const request = (line, done) =>
      new Promise((res) => {
        pending = { done, resolve: res };
        sock.write(line);
      });
    const isGet = (b) => b.endsWith("END\r\n");
    const isSet = (b) => b.endsWith("\r\n") && /^(STORED|NOT_STORED|SERVER_ERROR|ERROR)/.test(b);
    sock.on("connect", async () => {
      // Every key exists before the timed loop, so a get always finds its value.
      for (let k = 0; k < KEYS; k++) await request(`set k${k} 0 0 ${VALUE.length}\r\n${VALUE}\r\n`, isSet);
      await startGate;
      while (!deadline()) {
        const k = Math.floor(Math.random() * KEYS);
        const t0 = process.hrtime.bigint();
        if (Math.random() < 0.9) {
          await request(`get k${k}\r\n`, isGet);
          record("get", t0);
        } else {
          await request(`set k${k} 0 0 ${VALUE.length}\r\n${VALUE}\r\n`, isSet);
          record("set", t0);
        }
      }
      sock.end();
      resolve();
    });
  });
}

const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
const b64 = (s) => Buffer.from(s).toString("base64");

function post(pathName, body) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const req = http.request(
      {
        host,
        port,
        path: pathName,
        method: "POST",
        agent,
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(data) },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (d) => {
          text += d;
        });
        res.on("end", () =>
          res.statusCode === 200 ? resolve(text) : reject(new Error(`${pathName}: HTTP ${res.statusCode} ${text}`)),
        );
      },
    );
    req.on("error", reject);
    req.end(data);
  });
}

async function etcdWorker(w) {
  await startGate;
  while (!deadline()) {
    const key = b64(`k${w}-${Math.floor(Math.random() * KEYS)}`);
    try {
      let t0 = process.hrtime.bigint();
      await post("/v3/kv/put", { key, value: b64(VALUE) });
      record("put", t0);
      t0 = process.hrtime.bigint();
      const got = JSON.parse(await post("/v3/kv/range", { key }));
      if (got.kvs?.length !== 1) throw new Error("range did not return the key just put");
      record("get", t0);
    } catch (e) {
      fail(e);
      if (errors > 100) return;
    }
  }
}

let openGate;
const startGate = new Promise((r) => {
  openGate = r;
});

function pct(values, q) {
  if (values.length === 0) return null;
  const v = [...values].sort((a, b) => a - b);
  return v[Math.min(v.length - 1, Math.floor(q * v.length))];
}

async function main() {
  const worker = mode === "memcached" ? memcachedWorker : mode === "etcd" ? etcdWorker : null;
  if (!worker) throw new Error(`unknown mode ${mode}`);
  const workers = Array.from({ length: concurrency }, (_, i) => worker(i));
  // memcached workers preload their keys first; the clock starts when all have connected.
  setTimeout(
    () => {
      end = process.hrtime.bigint() + BigInt(Math.round(seconds * 1e9));
      openGate();
    },
    mode === "memcached" ? 300 : 0,
  );
  await Promise.all(workers);
  const all = Object.values(lat).flat();
  const byOp = {};
  for (const [op, v] of Object.entries(lat)) byOp[op] = { n: v.length, p50: pct(v, 0.5), p99: pct(v, 0.99) };
  process.stdout.write(
    `${JSON.stringify({ mode, ops: all.length, rate: all.length / seconds, p50: pct(all, 0.5), p99: pct(all, 0.99), byOp, errors, firstError })}\n`,
  );
  agent.destroy();
}

main().catch((e) => {
  process.stderr.write(`loadgen: ${e.stack || e}\n`);
  process.exit(1);
});
