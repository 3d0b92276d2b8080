// The triggerer benchmark's trigger for --distinct-events, loaded by the triggerer with
// --trigger-module as a user's trigger would be: DateTimeTrigger's wait, with an event of its own.
import { BaseTrigger, TriggerEvent, type JsonObject, type SerializedTrigger } from '../src/index.ts';

/**
 * Fires at `moment` like a DateTimeTrigger, with `"<moment>#<tag>"` as the payload: triggers due
 * at one moment, each with a different event, as most bursts of real waits would carry (a file's
 * path, a run's id). Each event is then sealed on its own when encrypted.
 */
export class DistinctEventTrigger extends BaseTrigger {
  static readonly classpath = 'bench.DistinctEventTrigger';
  readonly moment: string;
  readonly momentMs: number;
  readonly tag: number;

  constructor(kwargs: JsonObject) {
    super();
    this.moment = String(kwargs.moment);
    this.momentMs = Date.parse(this.moment);
    this.tag = Number(kwargs.tag);
  }

  override serialize(): SerializedTrigger {
    return { classpath: DistinctEventTrigger.classpath, kwargs: { moment: this.moment, tag: this.tag } };
  }

  override async *run(): AsyncGenerator<TriggerEvent<string>, void, void> {
    while (Date.now() < this.momentMs) await this.sleepUntil(this.momentMs);
    yield new TriggerEvent(`${this.moment}#${this.tag}`);
  }
}
