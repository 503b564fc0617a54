/**
 * The sample app's `POST /charges`, written with the competitor, `@node-idempotency/nestjs` on
 * Redis, for `npm run bench` to set beside ours: the same validation, tenant, charge row, PSP
 * call (the same client, keyed by the request's key) and answer, on the same database tables
 * and pool. What it does not do is what the library adds: nothing commits the charge's row
 * with a recovery point, nor its status with the stored answer (its answer is stored in Redis
 * after the response is decided, apart from the charge), and a crashed request is not resumed.
 */
import 'reflect-metadata';
import {
  Body,
  Controller,
  type DynamicModule,
  Headers,
  Inject,
  Module,
  Post,
  ValidationPipe,
} from '@nestjs/common';
import { APP_GUARD, APP_PIPE, NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { createRequire } from 'node:module';
import { type DataSource } from 'typeorm';
import { Charge, chargeView, Refund } from '../sample-app/charges/charge.entity.js';
import { CreateChargeDto } from '../sample-app/charges/create-charge.dto.js';
import { MIGRATIONS } from '../sample-app/app.module.js';
import { migrate } from '../sample-app/database/migrate.js';
import { PSP_CLIENT, PspClient } from '../sample-app/psp/psp.client.js';
import { Tenant, TenantGuard } from '../sample-app/tenant.js';

const load = createRequire(new URL('../../bench/competitor/package.json', import.meta.url));
const { NodeIdempotencyModule, Idempotent } = load('@node-idempotency/nestjs') as {
  NodeIdempotencyModule: { forRootAsync(options: object): DynamicModule };
  Idempotent: (options?: object) => MethodDecorator;
};

@Controller('charges')
class CompetitorChargesController {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    @Inject(PSP_CLIENT) private readonly psp: PspClient,
  ) {}

  @Post()
  @Idempotent()
  async create(
    @Tenant() tenantId: string,
    @Body() dto: CreateChargeDto,
    @Headers('idempotency-key') key: string,
  ) {
    const { identifiers } = await this.dataSource.manager.insert(Charge, {
      tenantId,
      amount: dto.amount,
      currency: dto.currency,
      customer: dto.customer,
      status: 'pending',
      pspAuthorization: null,
    });
    const outcome = await this.psp.authorize(
      { amount: dto.amount, currency: dto.currency, customer: dto.customer },
      `${key}:psp_authorized`,
    );
    const status = outcome.kind === 'authorized' ? 'succeeded' : outcome.kind;
    const [[charge]] = (await this.dataSource.query(
      `UPDATE charges SET status = $1, psp_authorization = $3 WHERE id = $2
       RETURNING id, amount, currency, customer, status,
                 psp_authorization AS "pspAuthorization", amount_refunded AS "amountRefunded"`,
      [status, identifiers[0].id, outcome.kind === 'authorized' ? outcome.authorizationId : null],
    )) as [Charge[], number];
    const { amount_refunded: _refunded, ...created } = chargeView(charge);
    return created;
  }
}

const databaseUrl = process.env.DATABASE_URL!;
await migrate({ type: 'postgres', url: databaseUrl, migrations: MIGRATIONS });

@Module({
  imports: [
    TypeOrmModule.forRoot({ type: 'postgres', url: databaseUrl, entities: [Charge, Refund] }),
    NodeIdempotencyModule.forRootAsync({
      storage: { adapter: 'redis', options: { url: process.env.COMPETITOR_REDIS_URL } },
    }),
  ],
  controllers: [CompetitorChargesController],
  providers: [
    { provide: PSP_CLIENT, useValue: new PspClient(process.env.PSP_URL!, 10_000) },
    { provide: APP_GUARD, useClass: TenantGuard },
    {
      provide: APP_PIPE,
      useValue: new ValidationPipe({
        whitelist: true,
        forbidNonWhitelisted: true,
        forbidUnknownValues: true,
      }),
    },
  ],
})
class CompetitorChargesModule {}

const app = await NestFactory.create(CompetitorChargesModule, new ExpressAdapter(), {
  rawBody: true,
  logger: false,
});
await app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
console.log(`listening on ${(app.getHttpServer().address() as { port: number }).port}`);
process.once('SIGTERM', () => void app.close().then(() => process.exit(0)));
