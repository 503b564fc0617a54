/** The Stripe-shaped app as a process of its own, on PORT, so a test can kill and restart it. */
import { type AdapterName } from '../support/bootstrap.js';
import { createStripeApp } from './stripe-app.js';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('DATABASE_URL is required');
const app = await createStripeApp({
  databaseUrl: url,
  adapter: (process.env.ADAPTER ?? 'express') as AdapterName,
  leaseMs: process.env.LEASE_MS ? Number(process.env.LEASE_MS) : undefined,
});
await app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
const address = app.getHttpServer().address() as { port: number };
console.log(`listening on ${address.port}`);
