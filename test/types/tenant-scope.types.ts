/**
 * Type-level tests, checked by `tsc -p tsconfig.json` in `npm test` (never run): each
 * `@ts-expect-error` line must fail to compile, so that TypeScript refuses at the call what
 * the module's start-up check refuses at run time. An expectation that compiles fails tsc.
 */
import { IdempotencyModule, type IdempotencyModuleOptions } from '../../lib/index.js';

const tenant = (request: { headers: Record<string, unknown> }) =>
  String(request.headers['x-tenant-id']);

// Taken: a tenant resolver, or keys declared global.
IdempotencyModule.forRoot({ tenant });
IdempotencyModule.forRoot({ tenant, globalKeys: false, leaseMs: 5000 });
IdempotencyModule.forRoot({ globalKeys: true });
IdempotencyModule.forRoot({ globalKeys: true, keyFrom: { body: 'requestId' } });
IdempotencyModule.forRootAsync({ useFactory: () => ({ tenant }) });

// @ts-expect-error neither tenant nor globalKeys: keys would have no scope
IdempotencyModule.forRoot({});
// @ts-expect-error other options do not stand in for the tenant
IdempotencyModule.forRoot({ leaseMs: 5000 });
// @ts-expect-error globalKeys: false declares nothing
IdempotencyModule.forRoot({ globalKeys: false });
// @ts-expect-error both: the start-up check refuses "either tenant or globalKeys: true"
IdempotencyModule.forRoot({ tenant, globalKeys: true });
// @ts-expect-error a tenant that is not a resolver
IdempotencyModule.forRoot({ tenant: '42' });
// @ts-expect-error the async factory is held to the same rule
IdempotencyModule.forRootAsync({ useFactory: () => ({ leaseMs: 5000 }) });

// @ts-expect-error an options object typed on its own is held to it too
export const unscoped: IdempotencyModuleOptions = { retentionMs: 86_400_000 };
export const scoped: IdempotencyModuleOptions = { tenant, retentionMs: 86_400_000 };
