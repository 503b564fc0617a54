import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import {
  Column,
  DataSource,
  Entity,
  type EntityManager,
  PrimaryColumn,
  PrimaryGeneratedColumn,
} from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  Idempotent,
  IdempotentTransaction,
} from '../lib/index.js';
import { bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';

/**
 * The beside-refusal on TypeORM (the pool seam's is in beside-nested-role.e2e-spec.ts). The RLS
 * recipe, `dataSource.transaction(em => { SET LOCAL ROLE …; … })` (or a query runner's own
 * startTransaction), with the service's own work sent beside it while it is open, not through
 * `em`: on the request's one runner that work ran inside the nested transaction, as the
 * restricted role, which row-level security lets see and touch no row of `stats`: 201 stored
 * and replayed, the counter 0 (without `@Idempotent()`: 1), a read that found nothing, an audit
 * row written as the wrong role. Now refused as it is sent (StatementBesideNestedTransactionError),
 * the request rolled back, nothing kept. The order is fixed by promises, not timing.
 * The controls: the recipe itself through `em`, a statement after the nested transaction
 * committed (the DataSource's role again), a read beside sent before the transaction opened
 * (alone, on a connection of its own), and work beside a nested transaction that set no role.
 */
@Entity({ name: 'stats', synchronize: false })
class Stat {
  @PrimaryColumn({ type: 'int' })
  id!: number;

  @Column({ type: 'int' })
  beside!: number;

  @Column({ type: 'int' })
  after!: number;
}

@Entity({ name: 'audits', synchronize: false })
class Audit {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  body!: string;
}

let role: string;
/** The errors the beside work met. */
const refusals: string[] = [];

/** What the service sends beside the nested transaction, and through what. */
type Beside =
  | 'query' // dataSource.query()
  | 'increment' // a repository's increment (an UpdateQueryBuilder)
  | 'builder' // dataSource.createQueryBuilder().update().execute()
  | 'save' // a repository's save of a new entity (TypeORM inserts through runner.manager)
  | 'read' // dataSource.query('SELECT …')
  | 'tx-repository' // IdempotentTransaction.getRepository(…).increment()
  | 'read-first' // a read sent before the nested transaction sent anything
  | 'none';

interface NotesBody {
  note: string;
  beside: Beside;
  /** How the nested transaction is opened: dataSource.transaction(), or a runner's own. */
  nest: 'transaction' | 'runner';
  /** Whether it sets its role (the RLS recipe), or not (a control). */
  setRole: boolean;
}

@Controller()
class NotesController {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly tx: IdempotentTransaction,
  ) {}

  @Post('notes')
  @Idempotent()
  idempotent(@Body() body: NotesBody) {
    return this.handle(body);
  }

  @Post('plain-notes')
  plain(@Body() body: NotesBody) {
    return this.handle(body);
  }

  /** The service's own work, as the DataSource's role (which bypasses row-level security). */
  private async besideWork(beside: Beside, note: string): Promise<number | null> {
    const stats = this.dataSource.getRepository(Stat);
    switch (beside) {
      case 'query': {
        const [, counted] = (await this.dataSource.query(
          'UPDATE stats SET beside = beside + 1 WHERE id = 1',
        )) as [unknown, number];
        return counted;
      }
      case 'increment':
        return (await stats.increment({ id: 1 }, 'beside', 1)).affected ?? null;
      case 'builder':
        return (
          (
            await this.dataSource
              .createQueryBuilder()
              .update(Stat)
              .set({ beside: () => 'beside + 1' })
              .where('id = 1')
              .execute()
          ).affected ?? null
        );
      case 'save':
        await this.dataSource.getRepository(Audit).save({ body: `beside ${note}` });
        return 1;
      case 'read':
      case 'read-first':
        return ((await this.dataSource.query('SELECT id FROM stats WHERE id = 1')) as unknown[])
          .length;
      case 'tx-repository':
        return (
          (await this.tx.getRepository(Stat).increment({ id: 1 }, 'beside', 1)).affected ?? null
        );
      case 'none':
        return null;
    }
  }

  private async handle(body: NotesBody) {
    let seen: number | null = null;
    // The service starts once the nested transaction has set its role (a read-first at once),
    // and the transaction awaits it before its insert: work of the request in parallel.
    let roleSet!: () => void;
    const ready = new Promise<void>((resolve) => (roleSet = resolve));
    const service = (async () => {
      if (body.beside !== 'read-first') await ready;
      try {
        seen = await this.besideWork(body.beside, body.note);
      } catch (error) {
        refusals.push((error as Error).name);
        throw error;
      }
    })();
    const work = async (em: EntityManager) => {
      // The recipe's role and its user setting; the control sets neither (since round 73 a
      // statement beside a nested transaction that set a setting for itself is refused too,
      // as it would run under it: `request.user` here).
      if (body.setRole) await em.query(`SET LOCAL ROLE ${role}`);
      if (body.setRole) await em.query(`SELECT set_config('request.user', 'alice', true)`);
      roleSet();
      await service;
      // The recipe itself, through em: as the restricted role, under its policy.
      await em.query(`INSERT INTO notes (owner, body) VALUES ('alice', $1)`, [body.note]);
      await em.getRepository(Audit).save({ body: `inside ${body.note}` });
    };
    if (body.nest === 'transaction') {
      await this.dataSource.transaction(work);
    } else {
      const runner = this.dataSource.createQueryRunner();
      await runner.connect();
      try {
        await runner.startTransaction();
        await work(runner.manager);
        await runner.commitTransaction();
      } catch (error) {
        await runner.rollbackTransaction();
        throw error;
      } finally {
        await runner.release();
      }
    }
    // After it committed: as the DataSource's role again.
    const [, after] = (await this.dataSource.query(
      'UPDATE stats SET after = after + 1 WHERE id = 1',
    )) as [unknown, number];
    const [who] = (await this.dataSource.query('SELECT current_user AS who')) as { who: string }[];
    return { note: body.note, seen, after, who: who.who === role ? 'restricted' : 'owner' };
  }
}

describe('TypeORM: a statement beside a nested transaction that set its role', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('typeorm_beside_role');
    role = `typeorm_beside_${database.name.slice(-8)}`;
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query(`
      CREATE ROLE ${role} NOLOGIN;
      CREATE TABLE notes (id serial PRIMARY KEY, owner text NOT NULL, body text NOT NULL);
      CREATE TABLE stats (id int PRIMARY KEY, beside int NOT NULL, after int NOT NULL);
      CREATE TABLE audits (id serial PRIMARY KEY, body text NOT NULL);
      INSERT INTO stats VALUES (1, 0, 0);
      GRANT SELECT, INSERT, UPDATE ON notes, stats, audits TO ${role};
      GRANT USAGE ON SEQUENCE notes_id_seq, audits_id_seq TO ${role};
      ALTER TABLE notes ENABLE ROW LEVEL SECURITY;
      ALTER TABLE stats ENABLE ROW LEVEL SECURITY;
      CREATE POLICY own_notes ON notes TO ${role}
        USING (owner = current_setting('request.user', true))
        WITH CHECK (owner = current_setting('request.user', true));`);

    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: database.url,
          entities: [Stat, Audit],
          migrations: [...IDEMPOTENCY_MIGRATIONS],
          migrationsRun: false,
          extra: { max: 4 },
        }),
        IdempotencyModule.forRoot({ globalKeys: true }),
      ],
      controllers: [NotesController],
    })
    class NotesModule {}
    app = await bootstrapTestApp(NotesModule, 'express');
  });

  afterAll(async () => {
    await app?.close();
    await admin?.end();
    await database?.drop();
    const cluster = new Client({ connectionString: process.env.TEST_DATABASE_URL });
    await cluster.connect();
    await cluster.query(`DROP ROLE IF EXISTS ${role}`).catch(() => undefined);
    await cluster.end();
  });

  const state = async (note: string) => {
    const stats = await admin.query<{ beside: number; after: number }>(
      'SELECT beside, after FROM stats WHERE id = 1',
    );
    const notes = await admin.query('SELECT 1 FROM notes WHERE body = $1', [note]);
    const audits = await admin.query('SELECT body FROM audits WHERE body LIKE $1 ORDER BY body', [
      `% ${note}`,
    ]);
    return {
      ...stats.rows[0],
      notes: notes.rows.length,
      audits: audits.rows.map((row: { body: string }) => row.body.split(' ')[0]),
    };
  };
  const moved = (
    before: { beside: number; after: number },
    now: Awaited<ReturnType<typeof state>>,
  ) => ({ ...now, beside: now.beside - before.beside, after: now.after - before.after });

  let n = 0;
  const send = (path: string, body: Omit<NotesBody, 'note'>, key?: string) => {
    const note = `${body.beside}-${body.nest}-${body.setRole}-${++n}`;
    const post = () => {
      const req = request(app.getHttpServer()).post(path);
      return (key ? req.set('Idempotency-Key', key) : req).send({ ...body, note });
    };
    return { note, post };
  };

  const refused: [Beside, NotesBody['nest']][] = [
    ['query', 'transaction'],
    ['query', 'runner'],
    ['increment', 'transaction'],
    ['builder', 'transaction'],
    ['save', 'transaction'],
    ['read', 'transaction'],
    ['tx-repository', 'transaction'],
  ];

  it.each(refused)(
    'refuses %s beside it (%s) as it is sent: 500, nothing kept, replayed',
    async (beside, nest) => {
      // The control: without @Idempotent() the beside work runs on a connection of its own,
      // as the DataSource's role.
      const plain = send('/plain-notes', { beside, nest, setRole: true });
      const plainBefore = await state(plain.note);
      const plainAnswer = await plain.post();
      expect({
        status: plainAnswer.status,
        body: plainAnswer.body as unknown,
        moved: moved(plainBefore, await state(plain.note)),
      }).toEqual({
        status: 201,
        body: { note: plain.note, seen: 1, after: 1, who: 'owner' },
        moved: {
          beside: ['read', 'save'].includes(beside) ? 0 : 1,
          after: 1,
          notes: 1,
          audits: beside === 'save' ? ['beside', 'inside'] : ['inside'],
        },
      });

      refusals.length = 0;
      const keyed = send('/notes', { beside, nest, setRole: true }, `beside-${beside}-${nest}`);
      const before = await state(keyed.note);
      const answer = await keyed.post();
      const replay = await keyed.post();
      expect({
        status: answer.status,
        body: answer.body as unknown,
        refusals,
        // The handler's failure, stored with the key and replayed (as on the pool seam).
        replayed: [replay.headers['idempotent-replayed'], replay.text === answer.text],
        moved: moved(before, await state(keyed.note)),
      }).toEqual({
        status: 500,
        body: { statusCode: 500, message: 'Internal server error' },
        refusals: ['StatementBesideNestedTransactionError'],
        replayed: ['true', true],
        moved: { beside: 0, after: 0, notes: 0, audits: [] },
      });
    },
  );

  it.each<[string, Omit<NotesBody, 'note'>, object]>([
    [
      // The recipe through em, then the DataSource again once it committed.
      'the recipe through em, and a statement after it',
      { beside: 'none', nest: 'transaction', setRole: true },
      { seen: null, moved: { beside: 0 } },
    ],
    [
      'the same in a query runner’s own transaction',
      { beside: 'none', nest: 'runner', setRole: true },
      { seen: null, moved: { beside: 0 } },
    ],
    [
      // Sent before the nested transaction sent anything: alone, on a connection of its own.
      'a read beside it sent before it opened',
      { beside: 'read-first', nest: 'transaction', setRole: true },
      { seen: 1, moved: { beside: 0 } },
    ],
    [
      'work beside a nested transaction that set no role',
      { beside: 'query', nest: 'transaction', setRole: false },
      { seen: 1, moved: { beside: 1 } },
    ],
    [
      'a save beside a nested transaction that set no role',
      { beside: 'save', nest: 'transaction', setRole: false },
      { seen: 1, moved: { beside: 0, audits: ['beside', 'inside'] } },
    ],
  ])('lets %s through: 201, as the DataSource’s role after it', async (label, body, expected) => {
    const keyed = send('/notes', body, `control-${label.replace(/\W+/g, '-')}`);
    const before = await state(keyed.note);
    const answer = await keyed.post();
    const replay = await keyed.post();
    const { seen, moved: expectedMoved } = expected as { seen: number | null; moved: object };
    expect({
      status: answer.status,
      body: answer.body as unknown,
      replayed: replay.text === answer.text,
      moved: moved(before, await state(keyed.note)),
    }).toEqual({
      status: 201,
      body: { note: keyed.note, seen, after: 1, who: 'owner' },
      replayed: true,
      moved: { beside: 0, after: 1, notes: 1, audits: ['inside'], ...expectedMoved },
    });
  });
});
