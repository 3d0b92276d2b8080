import { appendAuditEntry, listAuditEntries, type AuditEntry, type AuditRecord } from './audit-log.ts';
import type { StorageContext } from './context.ts';

/** The audit log of what people did: appendAuditEntry, listAuditEntries. */
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
}
