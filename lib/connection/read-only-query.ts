import { type PoolClient, type QueryResult } from 'pg';
import { queryStatement, type QueryStatement, sendPrefixed } from './prefixed-query.js';

/**
 * Makes the transaction of its round trip read only, ahead of the statement: in the extended
 * protocol the messages up to a Sync run in one implicit transaction, and the mode ends with
 * it. (`set_config`, not `SET TRANSACTION`: PostgreSQL warns of the latter outside a block.)
 */
const READ_ONLY = [{ text: "SELECT set_config('transaction_read_only', 'on', true)" }];

/**
 * Runs `statement` on `client` in a read-only transaction of its round trip: whatever it calls
 * (a view's function, a cast's, a domain's check, an aggregate of the app's), it cannot write
 * (25006). The caller sees the statement's result alone.
 */
export function readOnly(client: PoolClient, statement: QueryStatement): Promise<QueryResult> {
  return sendPrefixed(client, READ_ONLY, statement);
}

/**
 * `client` as a data layer that sends its reads with `client.query(text, values)` (TypeORM)
 * meets it: every statement it can carry runs in a read-only transaction of its round trip.
 */
export function readingOnly(client: PoolClient): PoolClient {
  return new Proxy(client, {
    get(target, key) {
      const value: unknown = Reflect.get(target, key, target);
      if (key !== 'query') return typeof value === 'function' ? value.bind(target) : value;
      return (...args: unknown[]) => {
        const statement = queryStatement(args);
        return statement
          ? readOnly(target, statement)
          : (target.query as (...a: unknown[]) => unknown)(...args);
      };
    },
  });
}
