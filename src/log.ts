/**
 * Diagnostics go to a log file, never to stdout (which carries only the CNI result) and
 * not to stderr by default (runtimes often discard it). One line per event, prefixed
 * with time, level, verb and container so concurrent invocations can be told apart.
 * The file is created 0600: it may hold container IDs and addresses.
 *
 * Messages quote what the runtime sent (container IDs, interface names, netns paths,
 * CNI_ARGS, annotations, config paths, and error texts naming them), so the logger
 * escapes every record as it writes it, call sites never: a newline in any of them would
 * otherwise start a line that looks like a record of its own.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import type { LogLevel } from "./cni/config";
import { mkdirs } from "./sys/mkdirs";

const ORDER: Record<LogLevel, number> = { error: 0, warn: 1, info: 2, debug: 3 };

export class Logger {
  private fd: number | undefined;
  private context = "";

  constructor(
    private file: string | undefined,
    private level: LogLevel = "info",
  ) {}

  configure(file: string, level: LogLevel): void {
    if (file !== this.file) this.close();
    this.file = file;
    this.level = level;
  }

  /** Whether records go anywhere yet: a config has named the file. */
  get configured(): boolean {
    return this.file !== undefined;
  }

  setContext(context: string): void {
    this.context = context;
  }

  error(msg: string): void {
    this.write("error", msg);
  }
  warn(msg: string): void {
    this.write("warn", msg);
  }
  info(msg: string): void {
    this.write("info", msg);
  }
  debug(msg: string): void {
    this.write("debug", msg);
  }

  private write(level: LogLevel, msg: string): void {
    if (ORDER[level] > ORDER[this.level] || !this.file) return;
    try {
      if (this.fd === undefined) {
        mkdirs(path.dirname(this.file), 0o755);
        this.fd = fs.openSync(this.file, "a", 0o600);
      }
      const record = escapeForLog(`${this.context}${msg}`);
      fs.writeSync(this.fd, `${new Date().toISOString()} ${level.toUpperCase()} [${process.pid}] ${record}\n`);
    } catch {
      // A log that cannot be written must never fail the pod's networking.
    }
  }

  close(): void {
    if (this.fd !== undefined) fs.closeSync(this.fd);
    this.fd = undefined;
  }
}

const NAMED_ESCAPES: Record<string, string> = { "\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\" };

/**
 * `text` with every control character (C0, DEL, C1, and the Unicode line and paragraph
 * separators some viewers break lines at) written as a JSON string would write it, and
 * the backslash doubled, so an escape in the log always means one in the text.
 */
export function escapeForLog(text: string): string {
  return text.replace(
    /[\\\p{Cc}\u2028\u2029]/gu,
    (c) => NAMED_ESCAPES[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

export const log = new Logger(undefined);
