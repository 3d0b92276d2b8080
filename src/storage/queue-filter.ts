import { sql } from '../database/kysely.ts';
import type { RawBuilder, SqlBool } from 'kysely';
import type { QueueSet } from '../model/queues.ts';

/*
 * How claims keep to the queues a daemon serves (see model/queues.ts). Both claim indexes lead
 * with the queue (migration 0017), so a claim reads the rows of one queue as one index range, in
 * claim order: a daemon serving several queues takes the first N of each and keeps the best N,
 * rather than scan and sort every claimable row of all of them. The conditions name the column
 * unqualified: they go in a query on one table (task_instance or trigger).
 */

/** The rows of one queue. */
export function inQueue(queue: string): RawBuilder<SqlBool> {
  return sql<SqlBool>`queue = ${queue}`;
}

/** The rows of any queue the set serves (for a probe, not an ordered claim). */
export function inQueues(queues: QueueSet): RawBuilder<SqlBool> {
  return sql<SqlBool>`queue in (${sql.join(queues)})`;
}
