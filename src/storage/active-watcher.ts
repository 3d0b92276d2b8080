import type { ExpressionBuilder } from 'kysely';
import type { DatabaseSchema } from '../database/schema.ts';

/**
 * Whether a DAG that is neither paused nor deleted watches the trigger row in the outer query: a
 * watcher runs only then. Its links to paused and deleted DAGs stay (with its row and cursor), for
 * when the DAG is unpaused or comes back.
 */
export function activelyWatched(eb: ExpressionBuilder<DatabaseSchema, 'trigger'>) {
  return eb.exists(
    eb
      .selectFrom('dag_watcher')
      .innerJoin('serialized_dag', 'serialized_dag.dag_id', 'dag_watcher.dag_id')
      .select('dag_watcher.dag_id')
      .whereRef('dag_watcher.trigger_id', '=', 'trigger.id')
      .where('serialized_dag.paused', '=', 0)
      .where('serialized_dag.deleted_at', 'is', null),
  );
}
