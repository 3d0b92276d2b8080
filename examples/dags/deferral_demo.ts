// The DAG `npm start` runs: 200 tasks that each wait 10 seconds. A task defers its wait to the
// triggerer and hands its worker slot back at once, so 4 slots finish all 200 in about 10 s;
// tasks that slept in their slots would need 200 x 10 s / 4 = 500 s.
import { BaseOperator, Dag, type RuntimeContext } from 'deferflow';
import { TimeDeltaTrigger } from 'deferflow/triggers';

/** Waits `seconds` without holding a worker slot, then returns how late the wake-up was. */
class WaitOperator extends BaseOperator<RuntimeContext> {
  constructor(
    taskId: string,
    readonly seconds: number,
  ) {
    super({ taskId });
  }

  execute(): never {
    return this.defer({
      trigger: new TimeDeltaTrigger({ delta: this.seconds }),
      method: 'afterWait',
      kwargs: { deferredAt: Date.now() },
    });
  }

  afterWait(context: RuntimeContext, _event: unknown, kwargs: { deferredAt: number }): { waitedMs: number } {
    const waitedMs = Date.now() - kwargs.deferredAt;
    context.log.info({ waited_ms: waitedMs }, `waited ${waitedMs} ms`);
    return { waitedMs };
  }
}

export const deferralDemo = new Dag({
  dagId: 'deferral_demo',
  description: '200 tasks that each wait 10 s on a TimeDeltaTrigger, without holding a worker slot',
}).add(...Array.from({ length: 200 }, (_, i) => new WaitOperator(`wait_${String(i + 1).padStart(3, '0')}`, 10)));
