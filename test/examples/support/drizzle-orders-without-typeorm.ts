/**
 * The Drizzle orders example's own main.ts, started where `typeorm` and `@nestjs/typeorm`
 * cannot be resolved: the app must not need them (its data layer is Drizzle on a pg.Pool).
 */
import { register } from 'node:module';

register(new URL('./deny-typeorm.hooks.js', import.meta.url));
try {
  await import('typeorm');
  throw new Error('typeorm is still resolvable: the hooks did not take');
} catch (error) {
  if ((error as { code?: string }).code !== 'ERR_MODULE_NOT_FOUND') throw error;
}
await import('../../../examples/drizzle-orders/main.js');
