/**
 * Reading the configuration from stdin: the cheap synchronous path for files and
 * blocking pipes, and the fallback for a non-blocking pipe whose writer is still writing.
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { readAllInput } from "../../src/sys/stdin";

let dir: string;
const fds: number[] = [];

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "nkc-stdin-"));
});
afterEach(() => {
  for (const fd of fds.splice(0)) {
    try {
      fs.closeSync(fd);
    } catch {
      // already closed by the stream that read it
    }
  }
  fs.rmSync(dir, { recursive: true, force: true });
});

const open = (file: string, flags: number) => {
  const fd = fs.openSync(file, flags);
  fds.push(fd);
  return fd;
};

describe("readAllInput", () => {
  it("reads a file larger than one read(2) chunk", async () => {
    const file = path.join(dir, "conf.json");
    const body = JSON.stringify({ cniVersion: "1.1.0", pad: "x".repeat(200_000) });
    fs.writeFileSync(file, body);
    const got = await readAllInput(open(file, fs.constants.O_RDONLY));
    expect(got.toString("utf8")).toBe(body);
  });

  it("reads nothing from /dev/null", async () => {
    expect((await readAllInput(open("/dev/null", fs.constants.O_RDONLY))).length).toBe(0);
  });

  it("waits for a late writer on a non-blocking pipe instead of failing with EAGAIN", async () => {
    const fifo = path.join(dir, "stdin");
    execFileSync("mkfifo", [fifo]);
    const reader = open(fifo, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
    const writer = open(fifo, fs.constants.O_WRONLY);
    // The writer has the pipe open but has written nothing yet: read(2) says EAGAIN.
    const reading = readAllInput(reader);
    setTimeout(() => {
      fs.writeSync(writer, '{"cniVersion":');
      setTimeout(() => {
        fs.writeSync(writer, '"1.0.0"}');
        fs.closeSync(writer);
        fds.splice(fds.indexOf(writer), 1);
      }, 20);
    }, 50);
    expect((await reading).toString("utf8")).toBe('{"cniVersion":"1.0.0"}');
  });
});
