import { idempotentFetch } from 'nestjs-idempotency-pg/client';
import { FileOperationStore } from 'nestjs-idempotency-pg/client/file-store'; // Node.js only

export async function checkout(cart: { id: string }, order: { amount: number }) {
  const response = await idempotentFetch(
    `${process.env.API_URL}/charges`, // e.g. the phases guide's app
    {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(order),
    },
    { intent: `checkout:${cart.id}`, store: new FileOperationStore('.pending-operations.json') },
  );
  return response;
}
