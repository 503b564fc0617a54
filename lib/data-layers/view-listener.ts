import { type EventEmitter } from 'node:events';
import { type PoolClient } from 'pg';
import { nodeOf } from '../transaction/sql/sql-parse.js';
import { statementsOf } from '../transaction/sql/sql-text.js';

/**
 * What a text is as to listening: `'listen'` when its every statement is a `LISTEN` or
 * `UNLISTEN` (`LISTEN job_done; LISTEN job_failed`, a leading comment or not), `'mixed'` when
 * only some are, undefined when none is (or the text is not one). Their effect is the
 * session's, not the transaction's: sent on the request's connection, they would start
 * listening only once the request commits (after the answer, so its code never hears what it
 * waits for), and leave that pooled connection listening for whoever takes it next. Read by
 * the library's SQL parser, statement by statement; the words alone first, so that a text with
 * neither is not parsed here.
 */
export function listenTextOf(text: unknown): 'listen' | 'mixed' | undefined {
  if (typeof text !== 'string' || !/listen/i.test(text)) return undefined;
  const statements = statementsOf(text);
  if (statements.length === 0) return ONE_LISTEN.test(text) ? 'listen' : undefined;
  const listens = statements.filter((statement) => {
    const [type] = nodeOf(statement.node) ?? [];
    return type === 'ListenStmt' || type === 'UnlistenStmt';
  }).length;
  if (listens === 0) return undefined;
  return listens === statements.length ? 'listen' : 'mixed';
}

/** One `LISTEN` or `UNLISTEN` alone, for a text the parser does not read. */
const ONE_LISTEN = /^\s*(?:LISTEN|UNLISTEN)\s+[^;]+;?\s*$/i;

/** Whether `text` is made of `LISTEN` and `UNLISTEN` statements only (see `listenTextOf`). */
export function isListenControl(text: unknown): boolean {
  return listenTextOf(text) === 'listen';
}

/** What a client of the pool tells its code of the server on its own (see `forwardEvents`). */
const FORWARDED = ['notification', 'notice'] as const;

/** Forwards `from`'s notifications and notices to `to`, until the returned stop is called. */
export function forwardEvents(from: EventEmitter, to: EventEmitter): () => void {
  const forwards = FORWARDED.map((event) => {
    const forward = (message: unknown) => to.emit(event, message);
    from.on(event, forward);
    return [event, forward] as const;
  });
  return () => {
    for (const [event, forward] of forwards) from.off(event, forward);
  };
}

/**
 * The connection of its own a view of the request's connection listens on (`LISTEN`,
 * `UNLISTEN`), as its code's client would without the library: notifications arrive on it
 * while the request runs, and are told on the view. Given back with the view, after an
 * `UNLISTEN *`, so that it listens for nobody afterwards. Lost (a failover,
 * `pg_terminate_backend`, an idle-session kill), it is told on the view as node-postgres tells
 * its client (`'error'`, then `'end'`): the only way code waiting for a notification learns
 * that none will come. It is then given back with the error at once (destroyed by the pool),
 * and the view's later `LISTEN`s fail with that error, as on the dead client.
 */
export class ViewListener {
  private readonly client: Promise<{ client: PoolClient; stop: () => void }>;
  /** The error the connection was lost with, if it was. */
  lost?: Error;
  private released = false;

  constructor(connect: () => Promise<PoolClient>, view: EventEmitter) {
    this.client = connect().then((client) => {
      const stop = forwardEvents(client, view);
      const onLost = (error: Error) => this.onLost(client, view, error, stop);
      client.once('error', onLost);
      return {
        client,
        stop: () => {
          stop();
          client.off('error', onLost);
        },
      };
    });
    this.client.catch(() => undefined);
  }

  query(args: unknown[]): Promise<unknown> {
    return this.client.then(({ client }) => {
      if (this.lost) throw this.lost;
      return (client.query as (...a: unknown[]) => Promise<unknown>)(...args);
    });
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    void this.client.then(
      async ({ client, stop }) => {
        stop();
        try {
          await client.query('UNLISTEN *');
          client.release();
        } catch (error) {
          client.release(error as Error);
        }
      },
      () => undefined,
    );
  }

  private onLost(client: PoolClient, view: EventEmitter, error: Error, stop: () => void): void {
    this.lost = error;
    stop();
    if (!this.released) {
      this.released = true;
      client.release(error);
    }
    // As its client would: an 'error' with none listening would throw here, in the pool's
    // socket handler, where node-postgres' own client has the library's listener at least.
    if (view.listenerCount('error') > 0) view.emit('error', error);
    view.emit('end');
  }
}
