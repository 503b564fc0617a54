// The client guide's checkout(), called as an app of the reader's would call it: once, for a
// cart, printing what it answered (the harness of test/long/guides.e2e-spec.ts; not a guide's file).
import { checkout } from './checkout.js';

const response = await checkout({ id: 'cart-1' }, { amount: 100 });
console.log(
  JSON.stringify({
    status: response.status,
    replayed: response.headers.get('idempotent-replayed'),
    body: await response.text(),
  }),
);
