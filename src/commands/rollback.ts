/**
 * The undo stack of an ADD: each step registers how to undo itself right after it
 * succeeds; on failure the undos run in reverse order. An undo that fails is logged and
 * the rest still run, so one stuck resource does not leave all the others behind.
 */
import { log } from "../log";

type Undo = () => Promise<void> | void;

export class Rollback {
  private readonly undos: { what: string; undo: Undo }[] = [];

  onFailure(what: string, undo: Undo): void {
    this.undos.push({ what, undo });
  }

  async run(): Promise<void> {
    for (const { what, undo } of this.undos.reverse()) {
      try {
        await undo();
        log.debug(`rolled back: ${what}`);
      } catch (e) {
        log.error(`rollback of "${what}" failed: ${(e as Error).message}`);
      }
    }
    this.undos.length = 0;
  }
}
