import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 5: two nested transactions of the handler's at once on TypeORM
 * (`Promise.allSettled` of two `dataSource.transaction()` calls: items processed in parallel,
 * each in a transaction of its own). Each `createQueryRunner()` is now a view of the one
 * runner, but the savepoints are still TypeORM's, named by the one runner's depth: A opens
 * `typeorm_1`, B opens `typeorm_2`; when A fails, TypeORM's `rollbackTransaction()` rolls
 * back to `typeorm_2`, B's savepoint, undoing B's first insert and keeping A's; when B then
 * commits, it releases `typeorm_1`, A's, and A's rolled-back insert commits with the answer.
 * Without the library: A's insert rolled back, both of B's kept. The promise: as without the
 * library, or a clear refusal (the pool seam refuses a rollback of a nested transaction that
 * holds another's statement: `StatementBesideNestedTransactionError`). The order is fixed by
 * promises, not timing. Observed: 201 stored, the marks a and b2 committed (A rolled back, kept;
 * B committed, its b1 lost).
 *
 * The simpler form: one nested transaction that fails, and a write beside it through
 * `dataSource.query()` while it is open. The write runs inside its savepoint and rolls back
 * with it: 201 stored, the write lost in silence (without the library: kept). The TypeORM
 * beside-refusal covers only a nested transaction that set its role.
 *
 * Both are written down in transactions.md ("One request, one connection": concurrent nested
 * transactions "are not supported", a repository call beside one is "rolled back with it"),
 * but the brief's rule is "as without the library, else a clear refusal", which the pool seam
 * keeps: with a view per `createQueryRunner()`, the runner now knows which view opened each
 * savepoint and which sent each statement, so TypeORM can refuse as the pool seam does.
 */
const errors: string[] = [];

/**
 * A clear refusal: the handler met one, or the request answered it. TypeORM's `transaction()`
 * swallows what its `rollbackTransaction()` throws (`catch (rollbackError) {}`) and rejects
 * with the callback's own error, so a refusal of that rollback (the pool seam's, too, goes on
 * with the rollback and only marks the request) never reaches the handler: the request then
 * answers 500 `transaction_aborted` (its cause the refusal), while the handler met nothing but
 * the nested work's own failure (no statement of it failed).
 */
function refusal(outcome: { status: number; body: unknown; errors: string[] }): boolean {
  if (outcome.errors.some((name) => name.endsWith('RefusedError'))) return true;
  if (outcome.errors.some((name) => name.startsWith('StatementBeside'))) return true;
  return (
    outcome.status === 500 &&
    (outcome.body as { code?: string }).code === 'transaction_aborted' &&
    outcome.errors.every((name) => name === 'Error')
  );
}

@Controller()
class ItemsController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('items')
  @Idempotent()
  idempotent(@Body() body: { tag: string }) {
    return this.both(body.tag);
  }

  @Post('plain/items')
  plain(@Body() body: { tag: string }) {
    return this.both(body.tag);
  }

  @Post('beside')
  @Idempotent()
  besideIdempotent(@Body() body: { tag: string }) {
    return this.beside(body.tag);
  }

  @Post('plain/beside')
  besidePlain(@Body() body: { tag: string }) {
    return this.beside(body.tag);
  }

  /**
   * One nested transaction that fails, and a write beside it (`dataSource.query`, not `em`)
   * while it is open: without the library the write commits on a connection of its own.
   */
  private async beside(tag: string) {
    let nestedInserted!: () => void;
    const inserted = new Promise<void>((resolve) => (nestedInserted = resolve));
    let besideWritten!: () => void;
    const written = new Promise<void>((resolve) => (besideWritten = resolve));
    const nested = this.dataSource.transaction(async (em) => {
      await em.query('INSERT INTO marks (tag) VALUES ($1)', [`${tag}-nested`]);
      nestedInserted();
      await written;
      throw new Error('the nested work fails');
    });
    const beside = (async () => {
      await inserted;
      await this.dataSource.query('INSERT INTO marks (tag) VALUES ($1)', [`${tag}-beside`]);
      besideWritten();
    })();
    const [first, second] = await Promise.allSettled([nested, beside]);
    for (const result of [first, second]) {
      if (result.status === 'rejected') errors.push((result.reason as Error).name);
    }
    return { tag, nested: first.status, beside: second.status };
  }

  private async both(tag: string) {
    const insert = 'INSERT INTO marks (tag) VALUES ($1)';
    let aInserted!: () => void;
    const aIn = new Promise<void>((resolve) => (aInserted = resolve));
    let bInserted!: () => void;
    const bIn = new Promise<void>((resolve) => (bInserted = resolve));
    // A: inserts, waits for B's insert, then fails (its transaction rolls back).
    const a = this.dataSource.transaction(async (em) => {
      await em.query(insert, [`${tag}-a`]);
      aInserted();
      await bIn;
      throw new Error('item a fails');
    });
    const aSettled = a.then(
      () => undefined,
      () => undefined,
    );
    // B: opens once A has inserted, inserts, waits for A's rollback, inserts again, commits.
    const b = (async () => {
      await aIn;
      await this.dataSource.transaction(async (em) => {
        await em.query(insert, [`${tag}-b1`]);
        bInserted();
        await aSettled;
        await em.query(insert, [`${tag}-b2`]);
      });
    })();
    const [first, second] = await Promise.allSettled([a, b]);
    for (const result of [first, second]) {
      if (result.status === 'rejected') errors.push((result.reason as Error).name);
    }
    return { tag, a: first.status, b: second.status };
  }
}

describe('adversary 5: two nested TypeORM transactions at once', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv5_typeorm_parallel', {
      controllers: [ItemsController],
      setup: async (admin) => {
        await admin.query('CREATE TABLE marks (tag text NOT NULL)');
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(() => fixture?.close());

  const marks = async (tag: string) =>
    (
      await admin.query<{ tag: string }>('SELECT tag FROM marks WHERE tag LIKE $1 ORDER BY tag', [
        `${tag}-%`,
      ])
    ).rows.map((row) => row.tag.slice(tag.length + 1));

  it('without the library: A rolled back, B kept whole (the control)', async () => {
    const response = await request(app.getHttpServer()).post('/plain/items').send({ tag: 'p' });
    expect({
      status: response.status,
      body: response.body as unknown,
      marks: await marks('p'),
    }).toEqual({
      status: 201,
      body: { tag: 'p', a: 'rejected', b: 'fulfilled' },
      marks: ['b1', 'b2'],
    });
  });

  it('with it: as without, or a clear refusal with nothing kept', async () => {
    errors.length = 0;
    const response = await request(app.getHttpServer())
      .post('/items')
      .set('Idempotency-Key', 'items-1')
      .send({ tag: 'i' });
    const outcome = {
      status: response.status,
      body: response.body as unknown,
      marks: await marks('i'),
      errors: [...errors],
    };
    console.log(`observed: ${JSON.stringify(outcome)}`);
    const asWithout =
      outcome.status === 201 && JSON.stringify(outcome.marks) === JSON.stringify(['b1', 'b2']);
    const refused = outcome.marks.length === 0 && refusal(outcome);
    expect({ ...outcome, acceptable: asWithout || refused }).toEqual({
      ...outcome,
      acceptable: true,
    });
  }, 30_000);

  it('one nested transaction that fails, a write beside it: as without (the write kept), or refused', async () => {
    const plain = await request(app.getHttpServer()).post('/plain/beside').send({ tag: 'pb' });
    expect({ status: plain.status, marks: await marks('pb') }).toEqual({
      status: 201,
      marks: ['beside'],
    });
    errors.length = 0;
    const response = await request(app.getHttpServer())
      .post('/beside')
      .set('Idempotency-Key', 'beside-1')
      .send({ tag: 'ib' });
    const outcome = {
      status: response.status,
      body: response.body as unknown,
      marks: await marks('ib'),
      errors: [...errors],
    };
    console.log(`observed: ${JSON.stringify(outcome)}`);
    const asWithout = outcome.status === 201 && JSON.stringify(outcome.marks) === '["beside"]';
    const refused = outcome.marks.length === 0 && refusal(outcome);
    expect({ ...outcome, acceptable: asWithout || refused }).toEqual({
      ...outcome,
      acceptable: true,
    });
  }, 30_000);
});
