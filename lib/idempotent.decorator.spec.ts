import { defer, from, lastValueFrom, type Observable } from 'rxjs';
import { IdempotencyContext, idempotencyStorage } from './transaction/idempotency-context.js';
import { Idempotent } from './idempotent.decorator.js';

/** A controller's route methods; each notes what it returned, under a label. */
class Charges {
  readonly made = new Map<unknown, string>();

  private note<T>(label: string, value: T): T {
    this.made.set(value, label);
    return value;
  }

  @Idempotent()
  sibling(label = 'sibling'): Promise<string> {
    return this.note(label, Promise.resolve(label));
  }

  @Idempotent()
  charge(label: string, fail = false): Promise<string> {
    return this.note(
      label,
      fail ? Promise.reject(new Error('provider blip')) : Promise.resolve(label),
    );
  }

  @Idempotent()
  callsSiblingAtOnce(): Promise<string> {
    return this.note('route', this.sibling());
  }

  @Idempotent()
  callsSiblingAfterAwait(): Promise<string> {
    return this.note(
      'route',
      (async () => {
        await Promise.resolve();
        return this.sibling();
      })(),
    );
  }

  @Idempotent()
  callsSiblingLazily(): Observable<string> {
    return this.note(
      'route',
      defer(() => from(this.sibling())),
    );
  }

  @Idempotent()
  resolvesToLazySibling(): Promise<Observable<string>> {
    return this.note('route', Promise.resolve(defer(() => from(this.sibling()))));
  }

  @Idempotent()
  throwsAtOnce(): never {
    throw new Error('timeout');
  }
}

/** Nest's part: it calls the handler, and subscribes to what it answered, outside its run. */
async function settle(answer: unknown): Promise<void> {
  const value: unknown = await Promise.resolve(answer).catch(() => undefined);
  if (value && typeof (value as Observable<unknown>).subscribe === 'function') {
    await lastValueFrom(value as Observable<unknown>);
  }
}

describe('@Idempotent(): the call whose outcome the request waits for (handlerReturned)', () => {
  it.each<[string, (charges: Charges) => Promise<void>, string | undefined]>([
    ['one call', (c) => settle(c.charge('first')), 'first'],
    [
      // A retrying interceptor inside @Idempotent(): the second attempt is the one going on.
      'a retry after the first attempt failed',
      async (c) => {
        await settle(c.charge('first', true));
        await settle(c.charge('second'));
      },
      'second',
    ],
    [
      'a sibling route method called at once from within it',
      (c) => settle(c.callsSiblingAtOnce()),
      'route',
    ],
    ['a sibling called after an await', (c) => settle(c.callsSiblingAfterAwait()), 'route'],
    [
      'a sibling called lazily by the Observable it returned',
      (c) => settle(c.callsSiblingLazily()),
      'route',
    ],
    [
      'a sibling called lazily by the Observable its Promise resolved to',
      (c) => settle(c.resolvesToLazySibling()),
      'route',
    ],
    [
      'a retry of an Observable answer (cancelled alike): the first kept',
      async (c) => {
        await settle(c.callsSiblingLazily());
        await settle(c.charge('second'));
      },
      'route',
    ],
    [
      'one that threw at once: nothing',
      (c) => settle(Promise.resolve().then(() => c.throwsAtOnce())),
      undefined,
    ],
  ])('%s', async (_case, run, expected) => {
    const charges = new Charges();
    const context = new IdempotencyContext(undefined, 201);
    await idempotencyStorage.run(context, () => run(charges));
    const returned = context.handlerReturned?.value;
    expect(returned === undefined ? undefined : charges.made.get(returned)).toBe(expected);
  });

  it('outside an idempotent request: nothing kept, the handler runs as it is', async () => {
    await expect(new Charges().charge('plain')).resolves.toBe('plain');
  });
});
