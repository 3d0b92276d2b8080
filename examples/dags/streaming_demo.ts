// Streaming and batch in one DAG (AIP-35's signal actions). `produce` is a long-running task
// that sends a signal per batch it produces; `process_batch` is a batch task that each new batch
// signal runs again, as a new try, reading which batch from the signal. Sending
// `streaming_demo.stop` stops the producer early (it ends skipped), e.g.
//   deferflow signal send streaming_demo.stop
// Try it: deferflow standalone --dags examples/dags --trigger-dag streaming_demo --exit-when-done
import { Dag, FunctionOperator, type RuntimeContext } from 'deferflow';

const BATCH = 'streaming_demo.batch';

/** Produces `params.batches` batches, `params.intervalMs` apart, announcing each with a signal; stops early when its signal is aborted. */
async function produce(context: RuntimeContext): Promise<{ batches: number }> {
  const batches = Number(context.params.batches);
  const intervalMs = Number(context.params.intervalMs);
  let sent = 0;
  while (sent < batches && !context.signal.aborted) {
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
    const rows = 100 + sent * 10; // what a real producer would have written somewhere
    const version = await context.sendSignal(BATCH, { batch: sent + 1, rows, runId: context.dagRun.runId });
    context.log.info({ batch: sent + 1, rows, signal_version: version }, `batch ${sent + 1} ready (${rows} rows)`);
    sent++;
  }
  return { batches: sent };
}

/** Handles the batch whose signal (re)started this try. */
async function processBatch(context: RuntimeContext): Promise<{ batch: number; rows: number; try: number } | null> {
  const signal = await context.actedSignal(BATCH);
  if (signal === null) return null; // started by its upstream after the last batch: nothing new
  const { batch, rows } = signal.value as { batch: number; rows: number };
  context.log.info({ batch, rows }, `processing batch ${batch} (${rows} rows), try ${context.taskInstance.tryNumber}`);
  return { batch, rows, try: context.taskInstance.tryNumber };
}

const producer = new FunctionOperator({
  taskId: 'produce',
  fn: produce,
  params: { batches: 5, intervalMs: 2000 },
  signals: [{ key: 'streaming_demo.stop', action: 'stop' }],
});
// Downstream of the producer, so it also runs once after the last batch if no signal started it;
// each batch signal restarts it, even after it finished (a running try is stopped first).
const batchTask = new FunctionOperator({ taskId: 'process_batch', fn: processBatch, signals: [{ key: BATCH, action: 'restart' }] });
producer.before(batchTask);

export const streamingDemo = new Dag({
  dagId: 'streaming_demo',
  description: 'A long-running producer signals each batch; a batch task is restarted by every batch signal',
}).add(producer, batchTask);
