/**
 * Adversary 100 (orm): two saves under `Promise.all`, one failing on a unique constraint, the
 * handler catching the failure as usual (`23505` → `ConflictException`): the reference promises
 * "500 `transaction_aborted` with `ConcurrentSaveFailedError`'s message ... nothing is committed
 * or stored", but the handler's 409 is STORED and replayed for good. The request's transaction
 * was refused (`ConcurrentSaveFailedError`, `refuse`), yet `refusalAnswer` lets the handler's
 * own answer stand for every refusal but four.
 *
 * User code:
 *
 *   @Post() @Idempotent() async register(@Body() b) {
 *     try {
 *       await Promise.all([
 *         this.accounts.save({ email: b.email }),
 *         this.profiles.save({ handle: b.handle }),      // unique: taken
 *       ]);
 *     } catch (e) {
 *       if ((e as { driverError?: { code?: string } }).driverError?.code === '23505')
 *         throw new ConflictException('already taken');
 *       throw e;
 *     }
 *     return { ok: true };
 *   }
 *
 * Code path: lib/data-layers/lazy-transaction.ts refuses the request (`ConcurrentSaveFailedError`,
 * `refuse`); lib/transaction/handler-failure.ts `onHandlerError` → `answerOfRefused`:
 * lib/transaction/failure.ts `refusalAnswer` → `classifyHandlerError(ConcurrentSaveFailedError)`
 * = 'final' → undefined; the 409 is 'final' → lib/transaction/commit-answer.ts `commitAnswer`
 * → `withoutEffects` (`undoEffects`; `commitNow` skips the refusal once effects are undone)
 * stores it.
 *
 * Docs quote (docs/reference/problems.md): "a TypeORM `save()` failed inside a transaction it
 * did not open (another save's, under `Promise.all`; ...), and the handler caught the error |
 * 500 | problem+json | `{"code": "transaction_aborted", ...}` with `ConcurrentSaveFailedError`'s
 * message (await each save ...): ... nothing is committed or stored"; the guide: "the request is
 * refused with `ConcurrentSaveFailedError` (500 `transaction_aborted`, nothing kept)".
 *
 * Severity: medium (a wrong stored answer: a 409 replayed for good where the docs promise a
 * 500 not stored; the client is told "already taken" for ever, even after the app awaits each
 * save; no effect doubled).
 *
 * Fails now (verified unskipped): statuses ['409', '409 replayed'], expected
 * ['500 transaction_aborted', '500 transaction_aborted']. Control: the handler that catches and
 * answers 201 anyway gets 500 `transaction_aborted`, nothing stored.
 *
 * Suggested fix: either answer every seam refusal of the request's transaction as the
 * refusal (not stored) whatever the handler threw after it, as for the four of adversary 98,
 * at least those whose docs say "nothing stored" (`ConcurrentSaveFailedError`,
 * `SavepointAcrossRunnersError`, `NestedTransactionOpenAtCommitError`); or say in
 * docs/reference/problems.md that a caught refusal turned into the handler's own error is
 * stored (and list it with the stated limit).
 *
 * Fixed (session of 2026-12-06, sixth): lib/transaction/failure.ts now decides in one table
 * (`REFUSAL_FATES`, table-driven in failure.spec.ts, a spec that fails when a refusal of seam-
 * errors.ts is missing from it) what becomes of every refusal the transaction can record: `own`
 * (the four of adversary 98: their own code), `aborted` (`ConcurrentSaveFailedError`,
 * `NestedTransactionOpenAtCommitError`, `SavepointAcrossRunnersError`: 500 `transaction_aborted`),
 * both never stored whatever the handler threw after them, and `stored` (its code's COMMIT,
 * session locks and settings, ...: the handler's error answer stored when let out).
 * `refusalAnswer` (read by `onHandlerError` and `withoutEffects`) applies it;
 * `classifyHandlerError` answers a `TransactionAbortedError` of a caught refusal as
 * `classifyCommitError` does (500 `transaction_aborted`, not stored). `PhaseRunner` hands a
 * refusal met in a phase's own transaction (its work's, or its refused commit's) to the request's
 * (`RequestTransaction.refusedInPhase`), so phases answer by the same rule as the handler.
 * docs/guides/transactions.md and docs/reference/problems.md say so.
 */
import { Body, ConflictException, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, Entity, PrimaryGeneratedColumn, type Repository } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv100_cs_accounts', synchronize: false })
class Account {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  email!: string;
}

@Entity({ name: 'adv100_cs_profiles', synchronize: false })
class Profile {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  handle!: string;
}

@Controller()
class RegisterController {
  constructor(
    @InjectRepository(Account) private readonly accounts: Repository<Account>,
    @InjectRepository(Profile) private readonly profiles: Repository<Profile>,
  ) {}

  private saveBoth(b: { email: string; handle: string }) {
    return Promise.all([
      this.accounts.save(this.accounts.create({ email: b.email })),
      this.profiles.save(this.profiles.create({ handle: b.handle })),
    ]);
  }

  @Post('caught-201')
  @Idempotent()
  async caught201(@Body() b: { email: string; handle: string }) {
    try {
      await this.saveBoth(b);
    } catch {
      // taken: fine, nothing to do
    }
    return { ok: true };
  }

  @Post('caught-409')
  @Idempotent()
  async caught409(@Body() b: { email: string; handle: string }) {
    try {
      await this.saveBoth(b);
    } catch (e) {
      if ((e as { driverError?: { code?: string } }).driverError?.code === '23505')
        throw new ConflictException('already taken');
      throw e;
    }
    return { ok: true };
  }
}

describe('adversary 100 orm: a concurrent save’s failure caught and answered 409', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv100_orm_concurrent_save', {
      controllers: [RegisterController],
      entities: [Account, Profile],
      imports: [TypeOrmModule.forFeature([Account, Profile])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE public.adv100_cs_accounts (id serial PRIMARY KEY, email text NOT NULL)',
        );
        await admin.query(
          'CREATE TABLE public.adv100_cs_profiles (id serial PRIMARY KEY, handle text NOT NULL UNIQUE)',
        );
        await admin.query("INSERT INTO public.adv100_cs_profiles (handle) VALUES ('taken')");
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: string, tag: string) {
    const post = () =>
      request(app.getHttpServer())
        .post(`/${route}`)
        .set('Idempotency-Key', `key-${tag}`)
        .send({ email: `${tag}@example.com`, handle: 'taken' });
    const first = await post();
    const again = await post();
    const statusOf = (r: request.Response) =>
      [
        String(r.status),
        (r.body as { code?: string }).code,
        r.headers['idempotent-replayed'] ? 'replayed' : undefined,
      ]
        .filter(Boolean)
        .join(' ');
    const accounts = (
      await fixture.admin.query<{ email: string }>(
        'SELECT email FROM public.adv100_cs_accounts WHERE email = $1',
        [`${tag}@example.com`],
      )
    ).rows.length;
    return { statuses: [statusOf(first), statusOf(again)], accounts };
  }

  const aborted = '500 transaction_aborted';

  it('control: caught and answered 201 anyway: 500 transaction_aborted, nothing stored or kept', async () => {
    expect(await scenario('caught-201', 'c1')).toEqual({
      statuses: [aborted, aborted],
      accounts: 0,
    });
  }, 30_000);

  it('caught and answered 409: 500 transaction_aborted, nothing stored', async () => {
    expect(await scenario('caught-409', 'b1')).toEqual({
      statuses: [aborted, aborted],
      accounts: 0,
    });
  }, 30_000);
});
