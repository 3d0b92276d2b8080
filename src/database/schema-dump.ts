import { sql } from './kysely.ts';
import type { Database } from './connect.ts';

/**
 * A stable text picture of the schema the migrations build, committed per dialect under
 * migrations/schema/ and checked by a test, so a migration change shows up in review.
 * The migrator's own bookkeeping tables are left out.
 */
export async function dumpSchema(database: Database): Promise<string> {
  return database.adapter.name === 'sqlite' ? dumpSqlite(database) : dumpPostgres(database);
}

async function dumpSqlite({ db }: Database): Promise<string> {
  const rows = await sql<{ sql: string }>`
    select sql from sqlite_master
    where sql is not null and name not like 'sqlite_%' and tbl_name not like 'deferflow_migration%'
    order by tbl_name, case type when 'table' then 0 else 1 end, name`.execute(db);
  return `${rows.rows.map((row) => `${normalizeWhitespace(row.sql)};`).join('\n')}\n`;
}

async function dumpPostgres({ db }: Database): Promise<string> {
  const columns = await sql<{
    table_name: string;
    column_name: string;
    data_type: string;
    is_nullable: string;
    column_default: string | null;
    is_identity: string;
  }>`
    select table_name, column_name, data_type, is_nullable, column_default, is_identity
    from information_schema.columns
    where table_schema = current_schema() and table_name not like 'deferflow_migration%'
    order by table_name, ordinal_position`.execute(db);
  const constraints = await sql<{ table_name: string; name: string; definition: string }>`
    select c.relname as table_name, con.conname as name, pg_get_constraintdef(con.oid) as definition
    from pg_constraint con join pg_class c on c.oid = con.conrelid
    where c.relnamespace = current_schema()::regnamespace and c.relname not like 'deferflow_migration%'
    order by c.relname, con.conname`.execute(db);
  const indexes = await sql<{ tablename: string; indexname: string; indexdef: string }>`
    select tablename, indexname, indexdef from pg_indexes
    where schemaname = current_schema() and tablename not like 'deferflow_migration%'
    order by tablename, indexname`.execute(db);
  const triggers = await sql<{ table_name: string; name: string; definition: string }>`
    select c.relname as table_name, t.tgname as name, pg_get_triggerdef(t.oid) as definition
    from pg_trigger t join pg_class c on c.oid = t.tgrelid
    where c.relnamespace = current_schema()::regnamespace and not t.tgisinternal
    order by c.relname, t.tgname`.execute(db);
  const functions = await sql<{ name: string; definition: string }>`
    select p.proname as name, pg_get_functiondef(p.oid) as definition
    from pg_proc p where p.pronamespace = current_schema()::regnamespace
    order by p.proname`.execute(db);
  const schema = (await sql<{ name: string }>`select current_schema() as name`.execute(db)).rows[0]!.name;
  // Index and constraint definitions name the schema; the dump must not (each test has its own).
  const schemaPrefix = new RegExp(`\\b${schema}\\.`, 'g');
  const lines: string[] = [];
  const tables = [...new Set(columns.rows.map((c) => c.table_name))];
  for (const table of tables) {
    lines.push(`table ${table}`);
    for (const c of columns.rows.filter((row) => row.table_name === table)) {
      const extras = [
        c.is_nullable === 'NO' ? 'not null' : null,
        c.is_identity === 'YES' ? 'identity' : null,
        c.column_default !== null ? `default ${c.column_default}` : null,
      ].filter(Boolean);
      lines.push(`  column ${c.column_name} ${c.data_type}${extras.length ? ` ${extras.join(' ')}` : ''}`);
    }
    for (const con of constraints.rows.filter((row) => row.table_name === table)) {
      lines.push(`  constraint ${con.name} ${con.definition.replace(schemaPrefix, '')}`);
    }
    for (const index of indexes.rows.filter((row) => row.tablename === table)) {
      lines.push(`  index ${index.indexdef.replace(schemaPrefix, '')}`);
    }
    for (const trigger of triggers.rows.filter((row) => row.table_name === table)) {
      lines.push(`  trigger ${trigger.definition.replace(schemaPrefix, '')}`);
    }
  }
  // A function pinned to the migration's search_path names the schema there too.
  const schemaName = new RegExp(`\\b${schema}\\b`, 'g');
  for (const fn of functions.rows)
    lines.push(`function ${fn.name} ${normalizeWhitespace(fn.definition.replace(schemaPrefix, '').replace(schemaName, '<schema>'))}`);
  return `${lines.join('\n')}\n`;
}

function normalizeWhitespace(text: string): string {
  return text
    .replace(/--[^\n]*/g, '')
    .replace(/\s+/g, ' ')
    .replace(/\( /g, '(')
    .replace(/ \)/g, ')')
    .trim();
}
