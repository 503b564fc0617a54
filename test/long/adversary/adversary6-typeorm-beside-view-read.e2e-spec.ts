import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import request from 'supertest';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 6: on TypeORM, a statement sent beside an open `dataSource.transaction()`
 * runs inside its savepoint; "if it rolls back it would take the statement along, where
 * without the library it commits on its own connection, so that rollback is refused with
 * `StatementBesideNestedTransactionError` (a plain read beside it loses nothing and is let
 * through)" (transactions.md). `NestedIdentity.markBeside` skips every text `isPlainRead`
 * takes for plain. But round 5 showed, and round 5's fix admits ("what no text shows … a view
 * whose query calls the app's function"), that a plain-looking read can write: such a read
 * beside the nested transaction writes inside its savepoint, the nested transaction rolls
 * back (its code failed; the handler catches it and answers), and the write goes with it in
 * silence: 201 stored, the audit row lost. Without the library the read ran on a connection of
 * its own and its audit row was kept. The pool seam marks every statement beside a nested
 * transaction, reads too, and refuses that rollback (a clear refusal).
 */
@Controller()
class NestedController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async handle(slot: string) {
    await this.dataSource
      .transaction(async (manager) => {
        await manager.query('INSERT INTO slots (slot) VALUES ($1)', [`${slot}-nested`]);
        // An audit service's read, through the DataSource (not the callback's manager).
        await this.dataSource.query(`SELECT tag FROM audited_${slot}`);
        throw new Error('the payment was declined');
      })
      .catch(() => undefined);
    await this.dataSource.query('INSERT INTO slots (slot) VALUES ($1)', [slot]);
    return { slot };
  }

  @Post('nested')
  @Idempotent()
  idempotent(@Body() body: { slot: string }) {
    return this.handle(body.slot);
  }

  @Post('plain/nested')
  plain(@Body() body: { slot: string }) {
    return this.handle(body.slot);
  }
}

describe('adversary 6: TypeORM, a writing "plain read" beside a nested transaction that rolls back', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv6_typeorm_beside_view', {
      controllers: [NestedController],
      max: 3,
      setup: async (admin) => {
        await admin.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
        await admin.query('CREATE TABLE audit (tag text NOT NULL)');
        await admin.query(`CREATE FUNCTION audit_view(tag text) RETURNS text LANGUAGE sql AS
          $$ INSERT INTO audit VALUES (tag) RETURNING tag $$`);
        for (const slot of ['plain', 'idempotent']) {
          await admin.query(`CREATE VIEW audited_${slot} AS SELECT audit_view('${slot}') AS tag`);
        }
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(() => fixture?.close());

  const count = async (table: string, column: string, value: string) =>
    (await admin.query(`SELECT 1 FROM ${table} WHERE ${column} = $1`, [value])).rows.length;
  const post = (path: string, slot: string) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', slot).send({ slot });

  it('without the library: 201, the nested insert rolled back, the audit row kept (the control)', async () => {
    const response = await post('/plain/nested', 'plain');
    expect({
      status: response.status,
      nested: await count('slots', 'slot', 'plain-nested'),
      audited: await count('audit', 'tag', 'plain'),
    }).toEqual({ status: 201, nested: 0, audited: 1 });
  });

  it('with it: as without (the audit row kept), or a clear refusal, never the write lost with a 201', async () => {
    const response = await post('/nested', 'idempotent');
    const outcome = {
      status: response.status,
      nested: await count('slots', 'slot', 'idempotent-nested'),
      audited: await count('audit', 'tag', 'idempotent'),
    };
    const asWithout = outcome.status === 201 && outcome.audited === 1;
    const refused = outcome.status === 500 && outcome.audited === 0;
    // Observed: 201, the audit row gone with the nested transaction's rollback.
    expect({ ...outcome, acceptable: asWithout || refused }).toMatchObject({ acceptable: true });
  }, 30_000);
});
