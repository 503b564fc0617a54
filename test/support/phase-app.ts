import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { bootstrapTestApp } from './bootstrap.js';
import { appDatabaseUrl, poolerOption } from './pgbouncer.js';
import { TypeOrmModule } from '@nestjs/typeorm';
import { type EntityManager } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  Idempotent,
  PhaseRunner,
  respond,
  RetryLaterError,
} from '../../lib/index.js';

/** The tables of the phase tests' app: a payment, and one row per committed phase run. */
export const PHASE_APP_DDL = `
CREATE TABLE IF NOT EXISTS payments (
  id serial PRIMARY KEY, customer text NOT NULL, amount int NOT NULL,
  status text NOT NULL, authorization_id text, worker text);
CREATE TABLE IF NOT EXISTS phase_runs (
  id serial PRIMARY KEY, payment_key text NOT NULL, phase text NOT NULL, worker text NOT NULL);
CREATE TABLE IF NOT EXISTS phase_locks (id int PRIMARY KEY);
INSERT INTO phase_locks VALUES (1) ON CONFLICT DO NOTHING;`;

export interface PhaseAppSettings {
  databaseUrl: string;
  pspUrl: string;
  leaseMs: number;
  /** Names this worker in the rows it writes. */
  worker: string;
  /** How long the third phase waits before it commits (to kill a worker after phase two). */
  phaseThreeDelayMs?: number;
  /**
   * How long the PSP phase waits between the PSP's answer and its record (to kill a worker
   * after the call, before its result is recorded).
   */
  recordDelayMs?: number;
  adapter?: 'express' | 'fastify';
}

interface PaymentBody {
  amount: number;
  customer: string;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function createController(settings: PhaseAppSettings) {
  @Controller()
  class PaymentsController {
    constructor(private readonly phases: PhaseRunner) {}

    private async pay(body: PaymentBody, key: string) {
      const record = (manager: EntityManager, phase: string) =>
        manager.query('INSERT INTO phase_runs (payment_key, phase, worker) VALUES ($1, $2, $3)', [
          key,
          phase,
          settings.worker,
        ]);

      const { paymentId } = await this.phases.run('order_created', async (manager) => {
        await record(manager, 'order_created');
        const rows = (await manager.query(
          `INSERT INTO payments (customer, amount, status, worker) VALUES ($1, $2, 'pending', $3)
           RETURNING id`,
          [body.customer, body.amount, settings.worker],
        )) as { id: number }[];
        return { paymentId: rows[0].id };
      });

      // The external call runs with no transaction open; its result is recorded after it.
      const authorization = await this.phases.call(
        'psp_authorized',
        async ({ idempotencyKey }) => {
          let res: Response;
          try {
            res = await fetch(`${settings.pspUrl}/v1/authorizations`, {
              method: 'POST',
              headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
              body: JSON.stringify({
                amount: body.amount,
                currency: 'eur',
                customer: body.customer,
              }),
            });
          } catch {
            throw new RetryLaterError('The PSP is unreachable', 1);
          }
          const answer = (await res.json()) as { id?: string };
          return res.status === 201 && answer.id
            ? { authorizationId: answer.id, derivedKey: idempotencyKey }
            : { declined: true as const };
        },
        async (manager, result) => {
          if (settings.recordDelayMs) await sleep(settings.recordDelayMs);
          await record(manager, 'psp_authorized');
          if ('authorizationId' in result) {
            await manager.query('UPDATE payments SET authorization_id = $1 WHERE id = $2', [
              result.authorizationId,
              paymentId,
            ]);
          }
          return result;
        },
      );

      await this.phases.run('receipt_prepared', async (manager) => {
        if (settings.phaseThreeDelayMs) await sleep(settings.phaseThreeDelayMs);
        await record(manager, 'receipt_prepared');
        return null;
      });

      return this.phases.finish(async (manager) => {
        await record(manager, 'finish');
        if ('declined' in authorization) {
          await manager.query(`UPDATE payments SET status = 'declined' WHERE id = $1`, [paymentId]);
          return respond(402, { error: 'card_declined', paymentId });
        }
        await manager.query(`UPDATE payments SET status = 'succeeded' WHERE id = $1`, [paymentId]);
        return { paymentId, ...authorization, status: 'succeeded', finishedBy: settings.worker };
      });
    }

    @Post('payments')
    @Idempotent()
    create(@Body() body: PaymentBody & { key: string }) {
      return this.pay(body, body.key);
    }

    @Post('payments-key-optional')
    @Idempotent({ required: false })
    createKeyOptional(@Body() body: PaymentBody & { key: string }) {
      return this.pay(body, body.key);
    }

    /**
     * A phase whose work meets a passing failure (its lock wait timed out: 55P03) and catches
     * it, as code that "carries on without the lock" does: PostgreSQL has aborted the phase's
     * transaction. `then: 'return'` returns (the phase's commit finds it aborted); `then:
     * 'query'` sends one more statement (it fails with 25P02, which the work throws).
     */
    @Post('payments-caught-lock-timeout')
    @Idempotent()
    async caughtLockTimeout(@Body() body: { customer: string; then: 'return' | 'query' }) {
      await this.phases.run('order_created', async (manager) => {
        await manager.query(`SET LOCAL lock_timeout = '50ms'`);
        try {
          await manager.query('SELECT id FROM phase_locks WHERE id = 1 FOR UPDATE');
        } catch {
          // Busy: carry on without it (the catch that leaves the transaction aborted).
        }
        if (body.then === 'query') {
          await manager.query(
            `INSERT INTO payments (customer, amount, status, worker) VALUES ($1, 1, 'pending', $2)`,
            [body.customer, settings.worker],
          );
        }
        return null;
      });
      return this.phases.finish(async (manager) => {
        await manager.query(
          `INSERT INTO payments (customer, amount, status, worker) VALUES ($1, 1, 'done', $2)`,
          [body.customer, settings.worker],
        );
        return { customer: body.customer };
      });
    }

    @Post('payments-with-heartbeat')
    @Idempotent({ heartbeat: true })
    createWithHeartbeat(@Body() body: PaymentBody & { key: string }) {
      return this.pay(body, body.key);
    }
  }
  return PaymentsController;
}

/** A Nest app whose handler runs in atomic phases and calls a (fake) PSP in one of them. */
export async function createPhaseApp(settings: PhaseAppSettings): Promise<INestApplication> {
  const url = await appDatabaseUrl(settings.databaseUrl);
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url,
        migrations: [...IDEMPOTENCY_MIGRATIONS],
        migrationsRun: true,
        connectTimeoutMS: 2000,
      }),
      // No heartbeat but on the route that asks for one: the fencing tests need a live worker
      // whose lease runs out; the heartbeat test contrasts it with one that is renewed.
      IdempotencyModule.forRoot({
        leaseMs: settings.leaseMs,
        heartbeat: false,
        globalKeys: true,
        ...poolerOption(),
      }),
    ],
    controllers: [createController(settings)],
  })
  class PhaseAppModule {}

  return bootstrapTestApp(PhaseAppModule, settings.adapter);
}
