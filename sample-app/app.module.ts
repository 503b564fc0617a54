import { type DynamicModule, Module, type Provider, ValidationPipe } from '@nestjs/common';
import { APP_FILTER, APP_GUARD, APP_INTERCEPTOR, APP_PIPE } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyErrorFilter,
  IdempotencyModule,
  postgresConnection,
} from '../lib/index.js';
import { Charge, Refund } from './charges/charge.entity.js';
import { ChargesController } from './charges/charges.controller.js';
import { ChargesService } from './charges/charges.service.js';
import { CreateCharges1764461000000 } from './migrations/1764461000000-CreateCharges.js';
import { CreateTransfers1764461100000 } from './migrations/1764461100000-CreateTransfers.js';
import { PSP_CLIENT, PspClient } from './psp/psp.client.js';
import { RequestTimeoutInterceptor } from './request-timeout.interceptor.js';
import { TenantGuard, tenantOf } from './tenant.js';
import { Transfer } from './transfers/transfer.entity.js';
import { TransfersController } from './transfers/transfers.controller.js';
import { TRANSFER_DELAY_MS, TransfersService } from './transfers/transfers.service.js';
import { WebhooksController } from './webhooks/webhooks.controller.js';

export interface AppSettings {
  databaseUrl: string;
  pspUrl: string;
  pspTimeoutMs: number;
  leaseMs: number;
  /** Whether a live instance renews its lease; the library's default (on) when not given. */
  heartbeat?: boolean;
  retentionMs: number;
  purgeIntervalMs: number;
  /** How long `POST /transfers` waits after its write, before it answers. */
  transferDelayMs: number;
  /** The global timeout (408) of every route; 0 is off. */
  requestTimeoutMs: number;
  /**
   * `'transaction'` behind a pooler in transaction mode; otherwise the library's default,
   * which asks the database at start-up and adapts to a pooler it meets.
   */
  pooler?: 'none' | 'transaction';
}

/** The migrations of the app: the library's, then its own. */
export const MIGRATIONS = [
  ...IDEMPOTENCY_MIGRATIONS,
  CreateCharges1764461000000,
  CreateTransfers1764461100000,
];

/** The payments service: the library used as any app would, through its public API only. */
@Module({})
export class AppModule {
  static register(settings: AppSettings): DynamicModule {
    return {
      module: AppModule,
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          // One host, or several as libpq lists them: then the one that accepts writes.
          ...postgresConnection(settings.databaseUrl),
          entities: [Charge, Refund, Transfer],
          // Run by main.ts before the app starts, under a lock (several instances may start).
          migrations: MIGRATIONS,
          migrationsRun: false,
          // A database that does not answer is a prompt 503, never a hung request.
          connectTimeoutMS: 5000,
        }),
        TypeOrmModule.forFeature([Charge, Transfer]),
        IdempotencyModule.forRoot({
          leaseMs: settings.leaseMs,
          heartbeat: settings.heartbeat,
          retentionMs: settings.retentionMs,
          purgeIntervalMs: settings.purgeIntervalMs,
          // `none` is not passed on as the library's 'none' ("no pooler, refuse one"): it leaves
          // the library to find out, so the app behind a pooler works all the same.
          ...(settings.pooler === 'transaction' ? { pooler: 'transaction' as const } : {}),
          tenant: (request) => tenantOf(request.headers) ?? '',
        }),
      ],
      controllers: [ChargesController, TransfersController, WebhooksController],
      providers: [
        ChargesService,
        TransfersService,
        { provide: PSP_CLIENT, useValue: new PspClient(settings.pspUrl, settings.pspTimeoutMs) },
        { provide: TRANSFER_DELAY_MS, useValue: settings.transferDelayMs },
        { provide: APP_GUARD, useClass: TenantGuard },
        // The library's errors outside @Idempotent() routes (the webhook's consumer) as its
        // problem responses: a 503 with Retry-After when the database is unreachable.
        { provide: APP_FILTER, useClass: IdempotencyErrorFilter },
        {
          provide: APP_PIPE,
          useValue: new ValidationPipe({
            whitelist: true,
            forbidNonWhitelisted: true,
            forbidUnknownValues: true,
          }),
        },
        ...requestTimeout(settings.requestTimeoutMs),
      ],
    };
  }
}

/**
 * A global interceptor, so that it wraps every route's own interceptors (`@Idempotent()`'s
 * included), as an app-wide timeout does. With 0 there is no timeout, and no interceptor.
 */
function requestTimeout(timeoutMs: number): Provider[] {
  if (timeoutMs === 0) return [];
  return [{ provide: APP_INTERCEPTOR, useValue: new RequestTimeoutInterceptor(timeoutMs) }];
}
