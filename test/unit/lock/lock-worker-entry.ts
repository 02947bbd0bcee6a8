/**
 * Child process for the lock tests, bundled with esbuild at test time:
 *   node worker.js <lock file> <queue root> hold <ms>      take the lock again and again, holding it
 *                                                        <ms> each time, until killed
 *   node worker.js <lock file> <queue root> once <timeout ms> <hold ms>
 *   node worker.js <lock file> <queue root> keep           take it once and keep it until killed
 * Prints one JSON line per event: {"waiting":true} just before asking (once), {"locked":1}
 * on the first turn, {"timeout":true} when the deadline passed first.
 */
import { LockTimeoutError, sleepSync, withFileLock } from "../../../src/sys/file-lock";

const [lockPath = "", queueRoot = "", mode = "", a = "0", b = "0"] = process.argv.slice(2);
const say = (event: object) => process.stdout.write(`${JSON.stringify(event)}\n`);

function holdFor(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

try {
  if (mode === "hold") {
    for (let turn = 1; ; turn++) {
      withFileLock(
        lockPath,
        60_000,
        () => {
          if (turn === 1) say({ locked: turn });
          holdFor(Number(a));
        },
        queueRoot,
      );
    }
  } else if (mode === "once") {
    say({ waiting: true });
    withFileLock(
      lockPath,
      Number(a),
      () => {
        say({ locked: 1 });
        holdFor(Number(b));
      },
      queueRoot,
    );
  } else if (mode === "keep") {
    withFileLock(
      lockPath,
      60_000,
      () => {
        say({ locked: 1 });
        for (;;) sleepSync(1_000);
      },
      queueRoot,
    );
  }
} catch (e) {
  if (!(e instanceof LockTimeoutError)) throw e;
  say({ timeout: true });
}
