import { type CallHandler } from '@nestjs/common';
import { type Subscriber, type Subscription } from 'rxjs';
import { type JoinableTransaction, transactionScope } from './transaction-scope.js';

/**
 * Subscribes to the handler inside the transaction's scope, so that its repositories and
 * queries join it. Nest binds a handler to the async context in which `next.handle()` is
 * called, so that call is made inside the scope, not only the subscription. Without a
 * transaction (a route that is not atomic) the handler runs as it is.
 */
export function handleInTransaction(
  transaction: JoinableTransaction | undefined,
  next: CallHandler,
  subscriber: Subscriber<unknown>,
): Subscription {
  const subscribe = () => next.handle().subscribe(subscriber);
  return transaction ? transactionScope.run(transaction, subscribe) : subscribe();
}
