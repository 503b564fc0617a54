import { idempotentFetch } from 'nestjs-idempotency-pg/client';
import { FileOperationStore } from 'nestjs-idempotency-pg/client/file-store'; // Node.js only

export async function checkout(cart: { id: string }, order: { amount: number }) {
  const response = await idempotentFetch(
    'https://api.example.com/charges',
    {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(order),
    },
    { intent: `checkout:${cart.id}`, store: new FileOperationStore('.pending-operations.json') },
  );
  return response;
}
