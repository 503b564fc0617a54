import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, PhaseRunner } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 39c: a phase's result that JSON holds but PostgreSQL's jsonb does not (a string cut
 * in the middle of an emoji, a NUL) turns into a generic 500 stored for ever, after the
 * external call it records was made: the client is told, on every retry, that its charge
 * failed, while the provider charged it.
 *
 * App: the phases guide's pattern (docs/guides/phases.md, snippet charges.service.ts) on the
 * pool seam: `phases.call('psp', ...)` calls the provider with the derived key and returns what
 * it answered, here `{ id, description }`, the description cut to a column's 12 UTF-16 units
 * with `String.prototype.slice` (the everyday idiom; it cuts 'coffee and 🍰 cake' inside the
 * emoji's surrogate pair). Then a local insert; the handler returns the phase's value.
 *
 * What happens: the phase's value is stored with its recovery point as
 * `jsonb_build_object($5::text, $6::jsonb)` with `$6 = JSON.stringify(value)`
 * (lib/claim/postgres-statements.ts:209; lib/claim/postgres-claim.store.ts:307, commitPhase,
 * `JSON.stringify(value === undefined ? null : value)`). JSON.stringify writes a lone surrogate
 * as `\ud83c` and a NUL as `\u0000`: valid JSON, which jsonb refuses (22P02 "invalid input
 * syntax for type json: Unicode low surrogate must follow a high surrogate", 22P05
 * "unsupported Unicode escape sequence: \u0000 cannot be converted to text"). The
 * refusal of the library's own statement goes through `guard` (lib/phases/phase-runner.service.ts:211-217:
 * `classifyHandlerError`, not 'retry') as if the handler had thrown it: Nest's generic 500
 * "Internal server error", stored (state 'done', response_code 500) and replayed for ever. The
 * provider was called once (its charge is real). The library already makes such text storable
 * elsewhere (lib/messages/storable-text.ts: NUL written out, lone surrogates as U+FFFD; keys and
 * tenants refused with a clear 400), not here.
 *
 * Expected: 201 with the charge, as the same handler answers without `@Idempotent()` (the
 * control route below: Express writes the lone surrogate as `\ud83c`), and as the same
 * `@Idempotent()` route answers when the cut falls between characters (second control); at the
 * least a clear, true error that is not stored as the request's final answer.
 *
 * Severity: critical by the guide (a wrong answer stored for ever: 500 for a charge that was
 * made; a client that believes it pays again under a new key).
 */

let pool: Pool;
let providerCalls: string[] = [];

@Controller()
class ChargesController {
  constructor(private readonly phases: PhaseRunner) {}

  private async charge(note: string) {
    const paid = await this.phases.call('psp', async ({ idempotencyKey }) => {
      providerCalls.push(idempotencyKey);
      // The provider's answer, its description cut to the app's column of 12.
      return { id: `ch_${providerCalls.length}`, description: note.slice(0, 12) };
    });
    await pool.query('INSERT INTO charges (charge) VALUES ($1)', [paid.id]);
    return paid;
  }

  @Post('charges')
  @Idempotent()
  idempotent(@Body() body: { note: string }) {
    return this.charge(body.note);
  }

  @Post('plain-charges')
  plain(@Body() body: { note: string }) {
    return this.charge(body.note);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ChargesController],
})
class ChargesModule {}

describe('adversary 39c: a phase result jsonb cannot hold', () => {
  let fixture: PoolApp;
  beforeAll(async () => {
    fixture = await startPoolApp('adv39c_phase_text', {
      module: ChargesModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE charges (charge text NOT NULL)');
      },
    });
  }, 60_000);
  afterAll(async () => fixture?.close());
  beforeEach(() => {
    providerCalls = [];
  });

  const post = (path: string, key: string | undefined, note: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send({ note });
  };

  async function conversation(key: string, note: string) {
    const first = await post('/charges', key, note);
    const retry = await post('/charges', key, note);
    return {
      statuses: [first.status, retry.status],
      charged: retry.body?.id,
      providerCalls: providerCalls.length,
    };
  }

  it('control: without @Idempotent(), the handler answers 201 with the cut text', async () => {
    const answer = await post('/plain-charges', undefined, 'coffee and 🍰 cake');
    expect(answer.status).toBe(201);
    expect(answer.body.id).toBe('ch_1');
  });

  it('control: the cut between characters: 201, replayed', async () => {
    expect(await conversation('adv39c-cake-ok', 'coffee and c cake')).toEqual({
      statuses: [201, 201],
      charged: 'ch_1',
      providerCalls: 1,
    });
  });

  // Fails today: statuses [500, 500] ("Internal server error", stored), charged undefined,
  // providerCalls 1.
  it.each([
    ['cut inside an emoji (a lone surrogate)', 'coffee and 🍰 cake'],
    ['a NUL in the text', 'coffee\u0000 and cake'],
  ])('%s: 201 with the charge, replayed', async (_, note) => {
    expect(await conversation(`adv39c-${note.length}-${note.charCodeAt(6)}`, note)).toEqual({
      statuses: [201, 201],
      charged: 'ch_1',
      providerCalls: 1,
    });
  });
});
