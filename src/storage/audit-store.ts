import { appendAuditEntry, listAuditEntries, listAuditEntriesOf, type AuditEntry, type AuditRecord } from './audit-log.ts';
import type { StorageContext } from './context.ts';

/** The audit log of what people did: appendAuditEntry, listAuditEntries, listAuditEntriesOf. */
export class AuditStore {
  readonly #context: StorageContext;

  constructor(context: StorageContext) {
    this.#context = context;
  }

  /** Appends one entry; resolves with its id. */
  appendAuditEntry(entry: AuditEntry, now = Date.now()): Promise<number> {
    return appendAuditEntry(this.#context, entry, now);
  }

  /** The latest `limit` entries, newest first; `before`: only those of a lower id (the next page). */
  listAuditEntries(options: { readonly limit: number; readonly before?: number }): Promise<AuditRecord[]> {
    return listAuditEntries(this.#context, options);
  }

  /** The entries of `action` since `since`, newest first, at most `limit`. */
  listAuditEntriesOf(action: string, since: number, limit: number): Promise<AuditRecord[]> {
    return listAuditEntriesOf(this.#context, action, since, limit);
  }
}
