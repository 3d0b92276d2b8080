import { sql } from './kysely.ts';
import type { DatabaseIntrospector, DatabaseMetadata, Kysely, SchemaMetadata, TableMetadata } from 'kysely';

/**
 * kysely's PostgreSQL introspector for the current schema only. kysely's own lists every table
 * of every schema and calls pg_get_serial_sequence on each name, so it fails ("schema ... does
 * not exist") when another session drops a schema meanwhile, and it reads the whole catalog
 * each time. deferflow's tables live in the current schema (the URL's search_path), and the
 * migrator, the one user of introspection, only asks whether its tables are there.
 */
export class CurrentSchemaIntrospector implements DatabaseIntrospector {
  constructor(private readonly db: Kysely<any>) {}

  async getSchemas(): Promise<SchemaMetadata[]> {
    const result = await sql<{ name: string }>`select nspname as name from pg_namespace where nspname = current_schema()`.execute(this.db);
    return result.rows;
  }

  async getTables(): Promise<TableMetadata[]> {
    const result = await sql<{
      schema: string;
      table: string;
      is_view: boolean;
      column: string | null;
      data_type: string | null;
      is_nullable: boolean | null;
      has_default: boolean | null;
      is_identity: boolean | null;
    }>`
      select n.nspname as schema, c.relname as table, c.relkind in ('v', 'm') as is_view,
             a.attname as column, format_type(a.atttypid, null) as data_type, not a.attnotnull as is_nullable,
             a.atthasdef as has_default, a.attidentity <> '' as is_identity
      from pg_class c
      join pg_namespace n on n.oid = c.relnamespace
      left join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
      where n.nspname = current_schema() and c.relkind in ('r', 'p', 'v', 'm')
      order by c.relname, a.attnum`.execute(this.db);
    const tables = new Map<string, TableMetadata & { columns: TableMetadata['columns'][number][] }>();
    for (const row of result.rows) {
      let table = tables.get(row.table);
      if (!table) {
        table = { name: row.table, schema: row.schema, isView: row.is_view, columns: [] };
        tables.set(row.table, table);
      }
      if (row.column !== null) {
        table.columns.push({
          name: row.column,
          dataType: row.data_type ?? 'unknown',
          isNullable: row.is_nullable ?? true,
          hasDefaultValue: (row.has_default ?? false) || (row.is_identity ?? false),
          isAutoIncrementing: row.is_identity ?? false,
        });
      }
    }
    return [...tables.values()];
  }

  async getMetadata(): Promise<DatabaseMetadata> {
    return { tables: await this.getTables() };
  }
}
