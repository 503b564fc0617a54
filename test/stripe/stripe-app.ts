import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { type DataSource } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  type IdempotencyModuleOptions,
  Idempotent,
} from '../../lib/index.js';
import { type AdapterName, bootstrapTestApp } from '../support/bootstrap.js';

export const STRIPE_DDL = `CREATE TABLE IF NOT EXISTS stripe_charges (
  id serial PRIMARY KEY, amount int NOT NULL, currency text NOT NULL)`;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A Stripe-shaped API on the library, for the official `stripe` client to drive: `POST
 * /v1/charges` with a form body, answered in Stripe's shapes, the library's refusals included.
 */
@Controller('v1')
class ChargesController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('charges')
  @Idempotent()
  async create(@Body() body: { amount: string; currency: string }) {
    const [row] = (await this.dataSource.query(
      'INSERT INTO stripe_charges (amount, currency) VALUES ($1, $2) RETURNING id',
      [Number(body.amount), body.currency],
    )) as { id: number }[];
    // HOLD_MS: the worker is slow enough for the test to kill it in the middle of a charge.
    await sleep(Number(process.env.HOLD_MS ?? 0));
    return {
      id: `ch_${row.id}`,
      object: 'charge',
      amount: Number(body.amount),
      currency: body.currency,
    };
  }
}

/** Stripe's error shape, which its clients throw on: `{ "error": { type, code, message } }`. */
export const stripeShape: NonNullable<IdempotencyModuleOptions['renderProblem']> = (problem) => ({
  body: {
    error: {
      type: problem.status >= 500 ? 'api_error' : 'idempotency_error',
      code: problem.body.code,
      message: problem.body.detail,
    },
  },
});

export async function createStripeApp(options: {
  databaseUrl: string;
  adapter: AdapterName;
  leaseMs?: number;
}): Promise<INestApplication> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: options.databaseUrl,
        migrations: [...IDEMPOTENCY_MIGRATIONS],
        migrationsRun: true,
        connectTimeoutMS: 2000,
      }),
      IdempotencyModule.forRoot({
        // One key space per API key, as Stripe scopes its keys.
        tenant: (request) => (request.headers.authorization === 'Bearer sk_test_other' ? 2 : 1),
        renderProblem: stripeShape,
        ...(options.leaseMs ? { leaseMs: options.leaseMs } : {}),
      }),
    ],
    controllers: [ChargesController],
  })
  class StripeAppModule {}
  return bootstrapTestApp(StripeAppModule, options.adapter);
}
