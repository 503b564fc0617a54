/**
 * Adversary 76 (orm): TypeORM's documented way to hand a subscriber context, a save's `data`
 * option (read back as `event.queryRunner.data`), is shared by every save of the request under
 * `@Idempotent()`: two saves at once (`Promise.all`, allowed by the docs) each read the other's.
 * An audit row attributes alice's note to bob, and that is committed and the 201 stored.
 * Without the library each save has a query runner of its own, and its own `data`.
 *
 *   await Promise.all([
 *     notes.save(aliceNote, { data: { actor: 'alice' } }),
 *     notes.save(bobNote, { data: { actor: 'bob' } }),
 *   ]);
 *   // subscriber
 *   async afterInsert(event) {
 *     await event.manager.query('INSERT INTO audit (body, actor) VALUES ($1, $2)',
 *       [event.entity.body, event.queryRunner.data.actor]);
 *   }
 *
 * Why: `EntityPersistExecutor.execute` (typeorm/persistence/EntityPersistExecutor.js) does
 * `queryRunner.data = this.options.data` on the runner `createQueryRunner()` gave it, and puts
 * the old value back when done. Under the library that runner is a view of the request's one
 * runner (`runnerView`, lib/data-layers/runner-view.ts) whose `set` trap writes every
 * property but `manager` through to the shared runner (`Reflect.set(own ?? target, …)`), and
 * whose `get` reads it from there: the second save's `data` overwrites the first's before the
 * first's INSERT, and the first's subscriber reads bob.
 *
 * Expected (docs/guides/transactions.md, "One request, one connection"): "Two saves at once
 * (`Promise.all` of saves) share the one connection: the second runs inside the first's
 * savepoint" — sharing the connection, with the one documented consequence (a failed one
 * refused); runner-view.ts's own note: a view is "as one `createQueryRunner()` in the
 * request's scope hands it out". TypeORM's own docs: `SaveOptions.data` is "Additional data to be passed with
 * persist method. This data can be used in subscribers then."
 *
 * Control: the same handler without `@Idempotent()`: 201, 'p1-alice by alice', 'p1-bob by bob'.
 *
 * Severity: high (a wrong effect committed and stored: the audit names the wrong actor; the
 * replay answers the stored 201).
 *
 * Fails now: `toEqual({ status: 201, audit: ['k1-alice by alice', 'k1-bob by bob'] })`
 * receives `audit: ['k1-alice by bob', 'k1-bob by bob']`. The control passes.
 *
 * Suggested fix: keep `data` per view in `runnerView` (as `manager` is: a view's own slot,
 * initialised `{}` as `BaseQueryRunner` does), read and written on the view, never the shared
 * runner; review the other per-runner fields TypeORM writes through a runner (`data`,
 * `isTransactionActive` on a failed start) the same way.
 *
 * Fixed: `runnerView` (lib/data-layers/runner-view.ts) keeps `data` per view, as `manager`
 * (initialised `{}`, read and written on the view, never the shared runner).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import {
  Column,
  Entity,
  type EntitySubscriberInterface,
  EventSubscriber,
  type InsertEvent,
  PrimaryGeneratedColumn,
  Repository,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv76_notes', synchronize: false })
class Note {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  body!: string;
}

/** Audits each new note with the actor its save was given (`save(…, { data: { actor } })`). */
@EventSubscriber()
class AuditNotes implements EntitySubscriberInterface<Note> {
  listenTo() {
    return Note;
  }

  async afterInsert(event: InsertEvent<Note>) {
    const actor = (event.queryRunner.data as { actor?: string } | undefined)?.actor ?? 'nobody';
    await event.manager.query('INSERT INTO adv76_audit (body, actor) VALUES ($1, $2)', [
      event.entity.body,
      actor,
    ]);
  }
}

type Body76 = { tag: string };

@Injectable()
class NotesService {
  constructor(@InjectRepository(Note) private readonly notes: Repository<Note>) {}

  /** Two notes, one by each of a shared document's editors, saved at once. */
  async run(body: Body76) {
    await Promise.all([
      this.notes.save(this.notes.create({ body: `${body.tag}-alice` }), {
        data: { actor: 'alice' },
      }),
      this.notes.save(this.notes.create({ body: `${body.tag}-bob` }), { data: { actor: 'bob' } }),
    ]);
    return { tag: body.tag };
  }
}

@Controller()
class NotesController {
  constructor(private readonly service: NotesService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body76) {
    return this.service.run(body);
  }

  @Post('plain')
  plain(@Body() body: Body76) {
    return this.service.run(body);
  }
}

describe('adversary 76: TypeORM, save(…, { data }) read by a subscriber, two saves at once', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv76_orm_save_data', {
      controllers: [NotesController],
      providers: [NotesService],
      entities: [Note],
      subscribers: [AuditNotes],
      imports: [TypeOrmModule.forFeature([Note])],
      max: 6,
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv76_notes (id serial PRIMARY KEY, body text NOT NULL);
          CREATE TABLE adv76_audit (id serial PRIMARY KEY, body text NOT NULL, actor text NOT NULL);`);
      },
    });
    ({ admin, app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const audited = async (tag: string) =>
    (
      await admin.query<{ body: string; actor: string }>(
        `SELECT body, actor FROM adv76_audit WHERE body LIKE $1 || '-%' ORDER BY body`,
        [tag],
      )
    ).rows.map((row) => `${row.body} by ${row.actor}`);

  const outcome = async (path: string, key: string | undefined, body: Body76) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    const answer = await call.send(body);
    return { status: answer.status, audit: await audited(body.tag) };
  };

  it('control: without @Idempotent(): 201, each note audited with its own actor', async () => {
    expect(await outcome('/plain', undefined, { tag: 'p1' })).toEqual({
      status: 201,
      audit: ['p1-alice by alice', 'p1-bob by bob'],
    });
  }, 30_000);

  it('keyed: 201, each note audited with its own actor', async () => {
    expect(await outcome('/keyed', 'k1', { tag: 'k1' })).toEqual({
      status: 201,
      audit: ['k1-alice by alice', 'k1-bob by bob'],
    });
  }, 30_000);
});
