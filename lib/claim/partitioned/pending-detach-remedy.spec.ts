import { pendingDetachRemedy } from './pending-detach-remedy.js';

describe('pendingDetachRemedy', () => {
  it.each<[string, string, string, string]>([
    [
      'both in public',
      'public.idempotency_keys',
      'public.idempotency_keys_20261207t01',
      'ALTER TABLE public.idempotency_keys DETACH PARTITION public.idempotency_keys_20261207t01 ' +
        'FINALIZE; DROP TABLE public.idempotency_keys_20261207t01',
    ],
    [
      'the partition in a schema of its maker, quoted',
      'idem.idempotency_keys',
      '"Api".idempotency_keys_20261207t01',
      'ALTER TABLE idem.idempotency_keys DETACH PARTITION "Api".idempotency_keys_20261207t01 ' +
        'FINALIZE; DROP TABLE "Api".idempotency_keys_20261207t01',
    ],
  ])('%s', (_name, keysTable, partition, sql) => {
    expect(pendingDetachRemedy(keysTable, partition)).toBe(sql);
  });
});
