/**
 * What the Bun-compiled executable does differently from the Node one, run under the
 * pinned Bun itself: stdin and stdout as plain descriptors (src/sys/stdio.ts), SHA-256
 * through Bun's own hasher (src/sys/sha256.ts), which must name every device and file as
 * node:crypto does, or a pod added by one executable is not found by the other, and libc
 * bound through bun:ffi instead of ffi-rs (src/sys/foreign.ts).
 */
import { execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { createRequire } from "node:module";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { sha256Hex } from "../../src/sys/sha256";
import { foreignCallReport } from "./fixtures/foreign-calls";

const require = createRequire(__filename);
const bun = path.join(path.dirname(require.resolve("@oven/bun-linux-x64/package.json")), "bin/bun");
const fixture = (name: string) => path.join(__dirname, "fixtures", name);

describe("under Bun", () => {
  it("reads all of a non-blocking stdin that arrives in pieces, and writes it out", async () => {
    const child = spawn(bun, [fixture("stdio-echo.ts")], { stdio: ["pipe", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString("utf8");
    });
    const exited = new Promise<number | null>((resolve) => child.on("exit", resolve));
    const big = "x".repeat(200_000);
    child.stdin.write('{"cniVersion":"1.1.0",');
    // The child is reading by now, and finds the pipe empty (EAGAIN) before the rest comes.
    await new Promise((r) => setTimeout(r, 300));
    child.stdin.end(`"pad":"${big}"}`);
    expect(await exited).toBe(0);
    const doc = `{"cniVersion":"1.1.0","pad":"${big}"}`;
    expect(out).toBe(`${doc.length}:${doc}`);
  });

  it("hashes as node:crypto does", () => {
    const inputs = ["", "cluster", "c1/eth0", "é".repeat(100), "x".repeat(10_000)];
    const underBun = JSON.parse(execFileSync(bun, [fixture("sha256-names.ts"), ...inputs], { encoding: "utf8" }));
    const byNode = inputs.map((s) => createHash("sha256").update(s).digest("hex"));
    expect(underBun).toEqual(byNode);
    expect(inputs.map((s) => sha256Hex([s]))).toEqual(byNode);
    expect(sha256Hex(["cluster"], 12)).toBe(byNode[1]?.slice(0, 12));
  });

  it("makes each kind of libc call as ffi-rs does under Node: errno, native memory, netlink, bpf", async () => {
    const underBun = JSON.parse(execFileSync(bun, [fixture("foreign-calls-main.ts")], { encoding: "utf8" }));
    const underNode = await foreignCallReport();
    expect(underBun.backend).toBe("bun:ffi");
    expect(underNode.backend).toBe("ffi-rs");
    expect({ ...underBun, backend: undefined }).toEqual({ ...underNode, backend: undefined });
    // And what they agree on is right.
    expect(underBun).toMatchObject({
      setnsBadFd: { errno: 9, message: "setns: Bad file descriptor" },
      nstype: 0x40000000,
      notNamespace: -1,
      lookedUp: "0123abcd",
      bpfError: { errno: 22 },
      locks: [true, false, true, true],
      loopbackIndex: 1,
      netlinkBadProtocol: { errno: 93 },
      clockNearUptime: true,
      nativeWritten: true,
      netnsCookie: netnsCookieFromPython(),
    });
  });
});

/** This namespace's cookie as another program reads it (SO_NETNS_COOKIE is 71). */
function netnsCookieFromPython(): string {
  const script = "import socket; print(int.from_bytes(socket.socket().getsockopt(socket.SOL_SOCKET, 71, 8), 'little'))";
  return execFileSync("/usr/bin/python3", ["-c", script], { encoding: "utf8" }).trim();
}
