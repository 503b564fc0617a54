/**
 * Adversary 74: on TypeORM, a plain read sent beside a nested transaction (the availability
 * service's own `dataSource.query()`, inside `dataSource.transaction()`'s callback) sees that
 * nested transaction's uncommitted row; the nested transaction then rolls back (payment
 * declined, the error caught), and the rollback is let through: the request answers 201 with
 * a count that includes a row that never existed, and that answer is stored and replayed.
 * Without the library the read runs on a connection of its own and cannot see an uncommitted
 * row (0). Round 73 fixed exactly this on the pool seam (adversary73-layers-read-beside-sees-
 * rolled-back, commit 8092a89: "a plain read beside a nested transaction that has written
 * marks it ... a 201 stored on a phantom row"); TypeORM's path was not.
 *
 *   await dataSource.transaction(async (manager) => {
 *     await manager.query('INSERT INTO adv74p_holds (tag) VALUES ($1)', [tag]);   // hold a seat
 *     held = await availability.holds(tag);   // the service: dataSource.query('SELECT count(*) …')
 *     if (declined) throw new Error('payment declined');
 *   }).catch(() => undefined);
 *   return { tag, held };                                                       // 201 { held: 1 }
 *
 * Why: `NestedIdentity.markBeside` (lib/data-layers/nested-identity.ts) returns at once for a
 * plain read (`isPlainRead(text)`: "rolled back, it loses nothing"), with no note of whether
 * the nested transaction has written (the pool seam's `Savepoint.wrote`), so
 * `NestedIdentity.ending(…, 'rollback')` says 'ok' and `refuseOutOfOrder` lets the rollback
 * through: the read ran INSIDE the savepoint on the request's one connection and answered
 * what the savepoint held, which the rollback undoes (a dirty read PostgreSQL never allows
 * between connections).
 *
 * Expected (docs/guides/data-layers.md, which transactions.md says TypeORM follows "as on a
 * node-postgres pool"): "A plain read beside it loses nothing and is let through" holds only
 * for one that saw nothing of the nested transaction; the promise is the stored answer
 * matches the committed effects. So: 201 with `held: 0`, or the request refused (500,
 * nothing stored as a 201); never a stored answer counting a row that was rolled back.
 *
 * Control: without `@Idempotent()`: 201, `held: 0`; keyed, with the nested transaction
 * committing: 201, `held: 1`, the row there (kept if it commits, as the docs say).
 *
 * Severity: high (a wrong answer, built from a row that never existed, stored and replayed to
 * every retry; nothing lost or written twice).
 *
 * Fails now: 'Expected: "as without the library, or refused", Received: "201 stored with
 * held 1, rows 0 (replayed)"' (the two controls pass).
 *
 * Fixed: `NestedTransaction.wrote`: a plain read beside one that wrote marks it
 * (`NestedIdentity.markBeside`), as on the pool seam.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body74 = { tag: string; declined?: boolean };

@Injectable()
class AvailabilityService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async holds(tag: string): Promise<number> {
    const rows = await this.dataSource.query<{ n: number }[]>(
      'SELECT count(*)::int AS n FROM adv74p_holds WHERE tag = $1',
      [tag],
    );
    return rows[0].n;
  }
}

@Injectable()
class BookingService {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly availability: AvailabilityService,
  ) {}

  async book(body: Body74) {
    let held = -1;
    await this.dataSource
      .transaction(async (manager) => {
        await manager.query('INSERT INTO adv74p_holds (tag) VALUES ($1)', [body.tag]);
        held = await this.availability.holds(body.tag);
        if (body.declined) throw new Error('payment declined');
      })
      .catch(() => undefined);
    return { tag: body.tag, held };
  }
}

@Controller()
class BookingsController {
  constructor(private readonly bookings: BookingService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body74) {
    return this.bookings.book(body);
  }

  @Post('plain')
  plain(@Body() body: Body74) {
    return this.bookings.book(body);
  }
}

describe('adversary 74: TypeORM, a plain read beside a nested transaction that wrote, then rolled back', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv74_orm_read_beside', {
      controllers: [BookingsController],
      providers: [BookingService, AvailabilityService],
      max: 6,
      setup: async (admin) => {
        await admin.query('CREATE TABLE adv74p_holds (id serial PRIMARY KEY, tag text NOT NULL)');
      },
    });
    ({ admin, app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const rows = async (tag: string) =>
    (await admin.query('SELECT 1 FROM adv74p_holds WHERE tag = $1', [tag])).rowCount ?? 0;

  const post = (path: string, key: string | undefined, body: Body74) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the service cannot see the uncommitted hold: held 0', async () => {
    const answer = await post('/plain', undefined, { tag: 'p1', declined: true });
    expect(answer.status).toBe(201);
    expect(answer.body).toEqual({ tag: 'p1', held: 0 });
    expect(await rows('p1')).toBe(0);
  }, 20_000);

  it('control: keyed, the nested transaction commits: 201, held 1, the row kept', async () => {
    const answer = await post('/keyed', 'k0', { tag: 'k0' });
    expect(answer.status).toBe(201);
    expect(answer.body).toEqual({ tag: 'k0', held: 1 });
    expect(await rows('k0')).toBe(1);
  }, 20_000);

  it('keyed, declined (rolled back): 201 with held 0, or refused; never a stored held 1 with no row', async () => {
    const first = await post('/keyed', 'k1', { tag: 'k1', declined: true });
    const again = await post('/keyed', 'k1', { tag: 'k1', declined: true });
    const kept = await rows('k1');
    const outcome =
      first.status === 201 && (first.body as { held: number }).held === 0
        ? 'as without the library, or refused'
        : first.status === 500 && kept === 0
          ? 'as without the library, or refused'
          : `${first.status} stored with held ${(first.body as { held: number }).held}, rows ${kept}` +
            `${again.headers['idempotent-replayed'] ? ' (replayed)' : ''}`;
    expect(outcome).toBe('as without the library, or refused');
  }, 20_000);
});
