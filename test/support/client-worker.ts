/**
 * A client of its own process for the client tests: sends one operation with
 * `idempotentFetch()` and a file store, and prints the final status. Killed between attempts
 * and started again, it resumes the operation with the key it kept.
 *
 * Env: URL, INTENT, STORE (the file's path).
 */
import { idempotentFetch } from '../../lib/client/index.js';
import { FileOperationStore } from '../../lib/client/file-operation-store.js';

const env = process.env;
const response = await idempotentFetch(
  env.URL!,
  { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"amount":5}' },
  { intent: env.INTENT!, store: new FileOperationStore(env.STORE!), baseDelayMs: 50 },
);
console.log(`status ${response.status}`);
