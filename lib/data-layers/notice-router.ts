import { type EventEmitter } from 'node:events';

/** Where a statement's notices go: the client its code sent it on (null: nobody's, the pool's). */
type Sender = EventEmitter | null;

/**
 * Tells each client of the pool (a view of the request's connection) the notices PostgreSQL
 * sends while its statement runs (`RAISE NOTICE`, `CREATE … IF NOT EXISTS, skipping`), as its
 * own connection's client would emit them (node-postgres' `'notice'`). The request's one
 * connection runs its statements one at a time, in the order handed over, and answers each
 * before the next starts: a notice belongs to the first statement handed over and not yet
 * answered. Listens on the connection only while a statement of its code is on it, so that
 * the pooled connection, given back, keeps no listener of a request that ended.
 */
export class NoticeRouter {
  private readonly running: { to: Sender }[] = [];
  private attached?: { connection: EventEmitter; listener: (notice: unknown) => void };

  /** `sending` (the statement of `to` just handed to `connection`), its notices told on `to`. */
  during<T>(connection: EventEmitter, to: Sender, sending: Promise<T>): Promise<T> {
    const entry = { to };
    this.running.push(entry);
    if (!this.attached) {
      const listener = (notice: unknown) => this.running[0]?.to?.emit('notice', notice);
      connection.on('notice', listener);
      this.attached = { connection, listener };
    }
    const done = () => {
      const at = this.running.indexOf(entry);
      if (at >= 0) this.running.splice(at, 1);
      if (this.running.length === 0 && this.attached) {
        this.attached.connection.off('notice', this.attached.listener);
        this.attached = undefined;
      }
    };
    sending.then(done, done);
    return sending;
  }
}

/** Tells `to` the notices of `connection` (a read run apart for it) until stopped. */
export function noticesTo(connection: EventEmitter, to: Sender): () => void {
  if (!to) return () => undefined;
  const forward = (notice: unknown) => to.emit('notice', notice);
  connection.on('notice', forward);
  return () => connection.off('notice', forward);
}
