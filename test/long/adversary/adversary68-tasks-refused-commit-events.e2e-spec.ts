/**
 * Adversary 68: a tick whose COMMIT is refused (a deferred constraint) publishes `claimed`,
 * then `released`, then `stored` (500) for one tick on one replica: counted twice in the
 * metrics (`idempotency.outcomes` released AND stored), where the docs promise a new key
 * counts "claimed and then stored or released", and per tick "one claimed, one stored".
 * A dashboard of released keys (work given back for a retry) shows a retry that never comes.
 *
 * The app: an in-process worker (createApplicationContext, the pool seam), one task
 * `@Cron('* * * * * *', { name: ... })` + `@IdempotentTask()` inserting a row whose foreign
 * key is `DEFERRABLE INITIALLY DEFERRED` and whose account is missing (the round-67 case).
 * The library's channels are subscribed, counted per tick (its key, the slot).
 *
 * What happens: `runSlot` (lib/tasks/idempotent-tasks.service.ts) calls `commitAnswer` with
 * TICK_DONE; its COMMIT fails; commitAnswer's catch rolls back, `releaseQuietly` gives the key
 * back and publishes `released` (reason `transaction_aborted`, the key "given back"). Then the
 * round-67 fix calls `commitAnswer` again with the tick's failure, which stores it and
 * publishes `stored` (500) and `storedError`. The tick is both released and stored.
 *
 * Expected (docs/reference/events-and-metrics.md): "A new key counts claimed and then stored
 * or released"; docs/guides/schedule.md: "per tick across the replicas: one claimed, one
 * stored". The tick that threw does just that.
 *
 * Control: the same task throwing in its work: claimed, stored (500); no released.
 *
 * Severity: low (metrics and events double-count the refused tick; a release alert fires for a
 * key that is in fact finished).
 *
 * Fixed: a tick's refused COMMIT keeps its key (`commitAnswer(..., keepsKey)`): nothing released,
 * its failure stored: claimed, then stored.
 */
import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule } from '@nestjs/schedule';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { Pool } from 'pg';
import { IDEMPOTENCY_CHANNELS, IdempotencyModule, IdempotentTask } from '../../../lib/index.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

let database: MigratedDatabase;
let pool: Pool;

async function startApp(name: string, throws: boolean): Promise<INestApplicationContext> {
  @Injectable()
  class Settle {
    @Cron('* * * * * *', { name })
    @IdempotentTask()
    async settle() {
      if (throws) throw new Error('the ledger refused the tick');
      await pool.query('INSERT INTO settled (account) VALUES (1)');
    }
  }
  @Module({
    imports: [ScheduleModule.forRoot(), IdempotencyModule.forRoot({ globalKeys: true, pool })],
    providers: [Settle],
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: [] });
}

/** The events of each tick of the task for ~3.5 s: per slot, the channels in order. */
async function tickEvents(name: string, throws: boolean) {
  const bySlot = new Map<string, string[]>();
  const listeners = (['claimed', 'released', 'stored'] as const).map((channel) => {
    const listener = (message: unknown) => {
      const event = message as { tenant?: string; key?: string };
      if (event.tenant !== `schedule:${name}`) return;
      bySlot.set(event.key!, [...(bySlot.get(event.key!) ?? []), channel]);
    };
    subscribe(IDEMPOTENCY_CHANNELS[channel], listener);
    return () => unsubscribe(IDEMPOTENCY_CHANNELS[channel], listener);
  });
  const app = await startApp(name, throws);
  try {
    await new Promise((resolve) => setTimeout(resolve, 3_500));
  } finally {
    await app.close();
    for (const off of listeners) off();
  }
  return [...bySlot.values()];
}

describe('adversary 68: the events of a tick whose COMMIT is refused', () => {
  beforeAll(async () => {
    database = await createMigratedDatabase('adv68_refused_events');
    pool = new Pool({ connectionString: database.url, max: 4 });
    await pool.query(
      `CREATE TABLE accounts (id int PRIMARY KEY);
       CREATE TABLE settled (id serial PRIMARY KEY,
         account int NOT NULL REFERENCES accounts (id) DEFERRABLE INITIALLY DEFERRED)`,
    );
  }, 60_000);

  afterAll(async () => {
    await pool?.end();
    await database?.drop();
  });

  it('control: a tick that throws is claimed, then stored', async () => {
    const ticks = await tickEvents('throws', true);
    expect(ticks.length).toBeGreaterThanOrEqual(2);
    for (const events of ticks) expect(events).toEqual(['claimed', 'stored']);
  }, 60_000);

  it('a tick whose COMMIT is refused is claimed, then stored (not released too)', async () => {
    const ticks = await tickEvents('refused', false);
    expect(ticks.length).toBeGreaterThanOrEqual(2);
    // Fails: ['claimed', 'released', 'stored'] for each tick.
    for (const events of ticks) expect(events).toEqual(['claimed', 'stored']);
  }, 60_000);
});
