/**
 * The log keeps one line per record whatever the runtime sent: text it supplied (a
 * container ID, a netns path, an error quoting either) is escaped by the logger itself.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { escapeForLog, Logger } from "../../src/log";

describe("escapeForLog", () => {
  it.each([
    ["a\nb", "a\\nb"],
    ["a\r\nb", "a\\r\\nb"],
    ["tab\there", "tab\\there"],
    ["nul\0", "nul\\u0000"],
    ["esc\u001b[31m", "esc\\u001b[31m"],
    ["del\u007f", "del\\u007f"],
    ["next line\u0085", "next line\\u0085"],
    ["line sep\u2028para sep\u2029", "line sep\\u2028para sep\\u2029"],
    ["back\\slash", "back\\\\slash"],
  ])("%j → %j", (raw, escaped) => {
    expect(escapeForLog(raw)).toBe(escaped);
  });

  it("leaves printable text as it is, quotes and all", () => {
    const text = `CNI_IFNAME "net%d" in /run/netns/pod-1: 10.0.0.1/32, fd00::1/128 — ok`;
    expect(escapeForLog(text)).toBe(text);
  });
});

describe("Logger", () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
  });

  it("writes one line per record when context and message carry line breaks", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nkt-log-"));
    dirs.push(dir);
    const file = path.join(dir, "plugin.log");
    const logger = new Logger(file, "debug");
    logger.setContext("STATUS a\n2026-01-01T00:00:00.000Z INFO [1] forged/eth0 ");
    logger.info("first\rsecond\u2028third");
    logger.error("stack:\n    at x\n    at y");
    logger.close();
    const lines = fs.readFileSync(file, "utf8").split("\n");
    expect(lines.pop()).toBe("");
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(
      /^\S+ INFO \[\d+\] STATUS a\\n2026-01-01T00:00:00\.000Z INFO \[1\] forged\/eth0 first\\rsecond\\u2028third$/,
    );
    expect(lines[1]).toMatch(/^\S+ ERROR \[\d+\] STATUS a\\n.* stack:\\n {4}at x\\n {4}at y$/);
  });
});
