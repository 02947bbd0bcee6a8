/**
 * The agent's log: one line per event on stderr (the container's log), with the time and
 * a level. Repeated messages (an API that stays unreachable) are told once per minute.
 */
type Level = "info" | "warn" | "error";

const lastTold = new Map<string, number>();
const REPEAT_AFTER_MS = 60_000;

function write(level: Level, message: string): void {
  const now = Date.now();
  const last = lastTold.get(message);
  if (last !== undefined && now - last < REPEAT_AFTER_MS) return;
  lastTold.set(message, now);
  if (lastTold.size > 1000) lastTold.clear();
  process.stderr.write(`${new Date(now).toISOString()} ${level} ${message}\n`);
}

export const agentLog = {
  info: (message: string) => write("info", message),
  warn: (message: string) => write("warn", message),
  error: (message: string) => write("error", message),
};
