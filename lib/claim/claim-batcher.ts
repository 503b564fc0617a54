import {
  IdempotencyStoreUnavailableError,
  PermanentDatabaseError,
} from '../shapes/idempotency.errors.js';
import { type KeyScope } from '../shapes/claim-store.interface.js';

/** One request's claim, as the batcher holds it until it goes. */
export interface ClaimRequest {
  scope: KeyScope;
  fingerprint: Buffer;
  leaseMs: number;
}

/**
 * The most claims sent as one statement. A batch is one round trip and one commit (one WAL
 * flush) for all its claims; past a few dozen the statement's own time (its rows' inserts and
 * index lookups) outgrows the round trip it saves, and every claim of the batch waits for the
 * slowest.
 */
export const MAX_CLAIM_BATCH = 64;

/**
 * Claims sent at once. One: while a claim is on its way to PostgreSQL, those that arrive
 * meanwhile wait for it and then go together, so a busy process pays one round trip (and one
 * commit) for many claims, and an idle one sends each claim the moment it comes.
 */
const CLAIMS_IN_FLIGHT = 1;

/** When a claim's request stops waiting for it, and what it is then told. */
export interface ClaimDeadline {
  /** The time (`Date.now()`) past which the claim is answered with `error()`. */
  at: number;
  error: () => unknown;
}

interface Waiting<R> {
  request: ClaimRequest;
  resolve: (row: R) => void;
  reject: (error: unknown) => void;
  /** Its deadline passed while its statement was on its way: its row goes to `late`. */
  gone?: boolean;
  /** Once gone: tells those waiting in `settling` that its statement has ended. */
  settle?: () => void;
}

/**
 * Batches claims under load. `send` runs one statement for a batch and answers each claim's
 * row in the batch's order. Each claim still gets its own row (its own outcome and fence) and
 * its own error: a batch that fails for a reason one of its rows may have caused (a value, a
 * constraint, a deadlock or a serialization failure between batches) is sent again claim by
 * claim, so that each request is answered as its own claim would have been; a failure of the
 * connection or the database (an outage, a deadline, a missing table) is every claim's alike,
 * and each gets it without a second wait.
 *
 * Two claims of one key never go in one batch: the second waits for the next, where it finds
 * the first's committed row (a statement does not see the rows its own insert adds, so both
 * would come back without a row). A batch goes in a fixed order of its keys (tenant, then
 * key), so that two processes' batches take their keys' locks in the same order and never
 * deadlock on each other.
 */
export class ClaimBatcher<R> {
  private readonly queue: Waiting<R>[] = [];
  private inFlight = 0;
  /** Keys whose claim was answered at its deadline while its statement is still on its way. */
  private readonly gone = new Map<string, Promise<void>>();

  constructor(
    /**
     * Runs one statement for `batch`; its rows in the batch's order. A statement that answers
     * after its own deadline (it failed with it, and so did its claims) hands its rows to
     * `late` instead: a claim's statement that lands as its cancel is on its way commits.
     */
    private readonly send: (batch: ClaimRequest[], late: (rows: R[]) => void) => Promise<R[]>,
    private readonly maxBatch = MAX_CLAIM_BATCH,
    /**
     * The row of a claim whose request was answered without it (at the claim's deadline while
     * its statement was on its way, or with its statement's deadline): a key claimed then is
     * nobody's, and must be given back.
     */
    private readonly late: (request: ClaimRequest, row: R) => void = () => undefined,
  ) {}

  /** Claims waiting for the statement on its way (for tests and metrics). */
  get waiting(): number {
    return this.queue.length;
  }

  /**
   * The claim's row. With a `deadline` (counted from when its request asked), the claim is
   * answered at it whatever holds it: batches ahead of it in the queue (each bounded by its
   * own statement's deadline, so together by many), or its own statement. One still queued
   * then is never sent; one on its way has its row, if any comes, handed to `late`.
   */
  claim(request: ClaimRequest, deadline?: ClaimDeadline): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const waiting: Waiting<R> = {
        request,
        resolve: (row) => {
          clearTimeout(timer);
          resolve(row);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      };
      if (deadline) {
        timer = setTimeout(
          () => {
            const queued = this.queue.indexOf(waiting);
            if (queued >= 0) this.queue.splice(queued, 1);
            else this.markGone(waiting);
            reject(deadline.error());
          },
          Math.max(0, deadline.at - Date.now()),
        );
      }
      this.queue.push(waiting);
      this.drain();
    });
  }

  /**
   * Ends once no claim of `scope` answered at its deadline is still on its way (undefined:
   * none is): its row, if it lands, has then been handed to `late`. The client's retry, sent
   * at once after its 503, waits for it rather than meeting that row held, for nothing.
   */
  settling(scope: KeyScope): Promise<void> | undefined {
    return this.gone.get(idOf(scope));
  }

  private markGone(waiting: Waiting<R>): void {
    waiting.gone = true;
    const id = idOf(waiting.request.scope);
    const settled: Promise<void> = new Promise<void>((resolve) => (waiting.settle = resolve)).then(
      () => {
        if (this.gone.get(id) === settled) this.gone.delete(id);
      },
    );
    this.gone.set(id, settled);
  }

  /** Answers `waiting` with its row, or hands the row on if its request is gone. */
  private answer(waiting: Waiting<R>, row: R): void {
    if (waiting.gone) this.late(waiting.request, row);
    else waiting.resolve(row);
  }

  private drain(): void {
    while (this.inFlight < CLAIMS_IN_FLIGHT && this.queue.length > 0) {
      const batch = takeBatch(this.queue, this.maxBatch);
      this.inFlight++;
      void this.run(batch).finally(() => {
        this.inFlight--;
        this.drain();
      });
    }
  }

  private async run(batch: Waiting<R>[]): Promise<void> {
    try {
      await this.sendBatch(batch);
    } finally {
      for (const waiting of batch) waiting.settle?.();
    }
  }

  private async sendBatch(batch: Waiting<R>[]): Promise<void> {
    const requests = batch.map((waiting) => waiting.request);
    // Rows after the statement's deadline: every claim of the batch was answered with it.
    const late = (rows: R[]) => requests.forEach((request, i) => this.late(request, rows[i]));
    try {
      const rows = await this.send(requests, late);
      batch.forEach((waiting, i) => this.answer(waiting, rows[i]));
    } catch (error) {
      if (batch.length === 1 || !mayBeOneRows(error)) {
        for (const waiting of batch) waiting.reject(error);
        return;
      }
      // Claim by claim, but for those whose request is gone: they are never sent again.
      await Promise.all(
        batch
          .filter((waiting) => !waiting.gone)
          .map((waiting) =>
            this.send([waiting.request], ([row]) => this.late(waiting.request, row)).then(
              ([row]) => this.answer(waiting, row),
              waiting.reject,
            ),
          ),
      );
    }
  }
}

/**
 * Takes the next batch off `queue`: up to `max` claims, in their order of arrival but for a
 * key already in the batch, which stays in the queue for the next one. Sorted by tenant, then
 * key, in the order of their UTF-16 code units, the same in every process.
 */
export function takeBatch<W extends { request: ClaimRequest }>(queue: W[], max: number): W[] {
  const batch: W[] = [];
  const keys = new Set<string>();
  for (let i = 0; i < queue.length && batch.length < max;) {
    const id = idOf(queue[i].request.scope);
    if (keys.has(id)) {
      i++;
      continue;
    }
    keys.add(id);
    batch.push(queue.splice(i, 1)[0]);
  }
  return batch.sort((a, b) => compareScopes(a.request.scope, b.request.scope));
}

function compareScopes(a: KeyScope, b: KeyScope): number {
  if (a.tenantId !== b.tenantId) return a.tenantId < b.tenantId ? -1 : 1;
  if (a.key !== b.key) return a.key < b.key ? -1 : 1;
  return 0;
}

/**
 * Whether a batch's failure may belong to one of its claims: a data exception (class 22), a
 * constraint (23), or a transaction rollback (40: a deadlock, a serialization failure), by the
 * SQLSTATE of the database's error under the library's.
 */
export function mayBeOneRows(error: unknown): boolean {
  return /^(22|23|40)/.test(stateUnder(error) ?? '');
}

/**
 * Whether a claim's statement was rolled back (class 40: a serialization failure, a
 * deadlock): nothing of it happened, and running it again reads what made it fail.
 */
export function isRolledBack(error: unknown): boolean {
  return /^40/.test(stateUnder(error) ?? '');
}

/** The SQLSTATE of the database's error under the library's, if any. */
function stateUnder(error: unknown): string | undefined {
  const cause =
    error instanceof IdempotencyStoreUnavailableError || error instanceof PermanentDatabaseError
      ? error.cause
      : error;
  const code = (cause as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** A key's identity across tenants: the tenant's length first ('ab' + 'c' is not 'a' + 'bc'). */
export function idOf({ tenantId, key }: KeyScope): string {
  return `${tenantId.length}:${tenantId}${key}`;
}
