import { RequestMethod } from '@nestjs/common';
import {
  type DecoratedMethod,
  keyArgProblem,
  messageHandlerProblem,
  routeProblem,
} from './route-problem.js';

const route: DecoratedMethod = {
  name: 'Payments.create',
  inController: true,
  httpMethod: RequestMethod.POST,
  intercepted: true,
  messageHandler: false,
  gatewayHandler: false,
};

/** A resolver is a provider's method, without an HTTP method. */
const resolver: Partial<DecoratedMethod> = { inController: false, httpMethod: undefined };

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
    ['a mutation resolver', { resolver: 'mutation', ...resolver }, undefined],
    [
      'a mutation resolver with its key in an argument',
      { resolver: 'mutation', keyArg: 'idempotencyKey', ...resolver },
      undefined,
    ],
    [
      'a query resolver',
      { resolver: 'query', ...resolver },
      "a GraphQL query is safe by GraphQL's definition and must not change state, as a GET; " +
        'keys are for mutations: put @Idempotent() on a @Mutation() resolver',
    ],
    [
      'a subscription resolver',
      { resolver: 'subscription', ...resolver },
      'a GraphQL subscription is a stream of events, not one answer a retry could get again; ' +
        'put @Idempotent() on the @Mutation() that changes state',
    ],
    [
      'a field resolver',
      { resolver: 'field', ...resolver },
      'a @ResolveField() runs once per object of an answer, not once per operation; put ' +
        '@Idempotent() on the root @Mutation() resolver',
    ],
    [
      'a mutation resolver without the interceptor',
      { resolver: 'mutation', ...resolver, intercepted: false },
      'IdempotencyInterceptor is not',
    ],
    [
      'a mutation resolver on a Redis store, atomic',
      {
        resolver: 'mutation',
        ...resolver,
        claimStore: {
          name: 'redis',
          known: ['postgres', 'redis'],
          transactional: false,
          atomic: true,
        },
      },
      'claim store "redis" is not in the app\'s database',
    ],
    [
      'a route with its key in a GraphQL argument',
      { keyArg: 'idempotencyKey' },
      "keyFrom: { arg: 'idempotencyKey' } reads a GraphQL mutation's argument, and a route has none",
    ],
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
      'a oneCommit route on the PostgreSQL store, atomic',
      {
        claimStore: {
          name: 'postgres',
          known: ['postgres'],
          transactional: true,
          atomic: true,
          oneCommit: true,
        },
      },
      undefined,
    ],
    [
      'a oneCommit route on a Redis store',
      {
        claimStore: {
          name: 'redis',
          known: ['postgres', 'redis'],
          transactional: false,
          atomic: false,
          oneCommit: true,
        },
      },
      'oneCommit commits the claim with the handler\'s work in the app\'s PostgreSQL, and claim store "redis" is not there',
    ],
    [
      'a oneCommit route that is not atomic',
      {
        claimStore: {
          name: 'postgres',
          known: ['postgres'],
          transactional: true,
          atomic: false,
          oneCommit: true,
        },
      },
      'a route that is not atomic commits its work apart; set oneCommit: false',
    ],
    [
      'a oneCommit mutation resolver',
      {
        resolver: 'mutation',
        ...resolver,
        claimStore: {
          name: 'postgres',
          known: ['postgres'],
          transactional: true,
          atomic: true,
          oneCommit: true,
        },
      },
      'oneCommit is for HTTP routes so far',
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

describe("keyArgProblem, by the schema's arguments", () => {
  it.each<[string, { name: string; defaultValue?: unknown }[], string | undefined]>([
    ['declared', [{ name: 'amount' }, { name: 'idempotencyKey' }], undefined],
    [
      'not declared (a typo)',
      [{ name: 'amount' }, { name: 'idempotency_key' }],
      'names no argument of the mutation in the schema (its arguments: amount, idempotency_key)',
    ],
    ['a mutation with no arguments', [], '(its arguments: none)'],
    [
      'declared with a default: every keyless call would share it',
      [{ name: 'idempotencyKey', defaultValue: 'none' }],
      'has a default value in the schema ("none")',
    ],
    [
      'declared with a null default',
      [{ name: 'idempotencyKey', defaultValue: null }],
      'has a default value',
    ],
  ])('%s', (_name, args, expected) => {
    const problem = keyArgProblem('Payments.charge', 'idempotencyKey', args);
    if (expected === undefined) expect(problem).toBeUndefined();
    else {
      expect(problem).toContain(
        "@Idempotent() on Payments.charge: keyFrom: { arg: 'idempotencyKey' } ",
      );
      expect(problem).toContain(expected);
    }
  });
});
