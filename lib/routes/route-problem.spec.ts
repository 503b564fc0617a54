import { RequestMethod } from '@nestjs/common';
import { type DecoratedMethod, routeProblem } from './route-problem.js';

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
      'ProcessedMessages.processOnce()',
    ],
    ['a gateway handler', { gatewayHandler: true, inController: false }, 'WebSocket'],
    ['a resolver', { resolverHandler: true, inController: false }, 'GraphQL'],
    ['a route without the interceptor', { intercepted: false }, 'IdempotencyInterceptor is not'],
  ])('%s', (_name, facts, expected) => {
    const problem = routeProblem({ ...route, ...facts });
    if (expected === undefined) expect(problem).toBeUndefined();
    else {
      expect(problem).toContain('@Idempotent() on Payments.create: ');
      expect(problem).toContain(expected);
    }
  });
});
