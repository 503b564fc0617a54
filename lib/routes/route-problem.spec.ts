import { RequestMethod } from '@nestjs/common';
import { type DecoratedMethod, messageHandlerProblem, routeProblem } from './route-problem.js';

const route: DecoratedMethod = {
  name: 'Payments.create',
  inController: true,
  httpMethod: RequestMethod.POST,
  intercepted: true,
  messageHandler: false,
  gatewayHandler: false,
  resolverHandler: false,
};

describe('routeProblem', () => {
  it.each<[string, Partial<DecoratedMethod>, string | undefined]>([
    ['a POST route', {}, undefined],
    ['a PUT route', { httpMethod: RequestMethod.PUT }, undefined],
    ['a PATCH route', { httpMethod: RequestMethod.PATCH }, undefined],
    ['a DELETE route', { httpMethod: RequestMethod.DELETE }, undefined],
    ['a GET route', { httpMethod: RequestMethod.GET }, 'GET is safe'],
    ['a HEAD route', { httpMethod: RequestMethod.HEAD }, 'HEAD is safe'],
    ['an OPTIONS route', { httpMethod: RequestMethod.OPTIONS }, 'OPTIONS is safe'],
    ['a controller method with no route', { httpMethod: undefined }, 'not a route handler'],
    ['a provider method', { inController: false, httpMethod: undefined }, 'not a controller'],
    [
      'a message handler',
      { messageHandler: true, httpMethod: undefined },
      'use @IdempotentMessage()',
    ],
    ['a gateway handler', { gatewayHandler: true, inController: false }, 'WebSocket'],
    ['a resolver', { resolverHandler: true, inController: false }, 'GraphQL'],
    ['a route without the interceptor', { intercepted: false }, 'IdempotencyInterceptor is not'],
    [
      'an atomic route on the PostgreSQL store',
      { claimStore: { name: 'postgres', known: ['postgres'], transactional: true, atomic: true } },
      undefined,
    ],
    [
      'a route that is not atomic on a Redis store',
      {
        claimStore: {
          name: 'redis',
          known: ['postgres', 'redis'],
          transactional: false,
          atomic: false,
        },
      },
      undefined,
    ],
    [
      'an atomic route on a Redis store',
      {
        claimStore: {
          name: 'redis',
          known: ['postgres', 'redis'],
          transactional: false,
          atomic: true,
        },
      },
      'claim store "redis" is not in the app\'s database, so the handler\'s effects cannot commit with its stored response (atomic, the default); set atomic: false',
    ],
    [
      'a store the module does not have',
      { claimStore: { name: 'redsi', known: ['postgres', 'redis'], atomic: false } },
      'no claim store is named "redsi"; the module has "postgres", "redis" (add it to claimStores)',
    ],
  ])('%s', (_name, facts, expected) => {
    const problem = routeProblem({ ...route, ...facts });
    if (expected === undefined) expect(problem).toBeUndefined();
    else {
      expect(problem).toContain('@Idempotent() on Payments.create: ');
      expect(problem).toContain(expected);
    }
  });
});

describe('messageHandlerProblem', () => {
  it.each<[string, Partial<DecoratedMethod>, boolean]>([
    ['an event handler of a controller', { messageHandler: true, httpMethod: undefined }, false],
    ['an HTTP route', {}, true],
    ['a provider method', { inController: false, httpMethod: undefined }, true],
  ])('%s', (_name, facts, fails) => {
    const problem = messageHandlerProblem({ ...route, ...facts });
    expect(
      problem === undefined
        ? false
        : problem.startsWith('@IdempotentMessage() on Payments.create: '),
    ).toBe(fails);
  });
});
