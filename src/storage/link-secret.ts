import { randomBytes } from 'node:crypto';
import { toDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';

const INPUT_LINK_SECRET = 'input_link_key';

/**
 * The key that signs human-input links, made on first use and kept in the database, so every
 * worker (making links) and every process answering them (the status page, the CLI) agrees on it
 * with nothing to configure. Whoever can read the database could forge a link, but they could
 * write the response itself as well. Two processes making it at once keep the first one written.
 */
export async function inputLinkSecret({ db }: StorageContext, now: number): Promise<Buffer> {
  const read = () => db.selectFrom('deferflow_secret').select('value').where('name', '=', INPUT_LINK_SECRET).executeTakeFirst();
  let row = await read();
  if (!row) {
    await db
      .insertInto('deferflow_secret')
      .values({ name: INPUT_LINK_SECRET, value: randomBytes(32).toString('base64url'), created_at: toDbTime(now) })
      .onConflict((conflict) => conflict.column('name').doNothing())
      .execute();
    row = await read();
  }
  return Buffer.from(row!.value, 'base64url');
}
