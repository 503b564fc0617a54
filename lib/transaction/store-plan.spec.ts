import { lateAnswerStorable, storePlan, type StorePlan } from './store-plan.js';

describe('storePlan (how an owned request’s answer is kept)', () => {
  const defaultStoreIf = (status: number) => status < 500 || status === 500;
  const only2xx = (status: number) => status >= 200 && status < 300;
  it.each<[string, number, boolean, (status: number) => boolean, StorePlan]>([
    ['a 201, effects kept', 201, false, defaultStoreIf, 'with-effects'],
    ['the handler threw: its 400 stored alone', 400, true, defaultStoreIf, 'alone'],
    ['too large: the 500 stored alone', 500, true, defaultStoreIf, 'alone'],
    ['a 409 a storeIf of 2xx refuses', 409, false, only2xx, 'not-stored'],
    ['a thrown 503 a storeIf of 2xx refuses', 503, true, only2xx, 'not-stored'],
    ['a 200 a storeIf of 2xx keeps', 200, false, only2xx, 'with-effects'],
  ])('%s', (_name, status, withoutEffects, storeIf, expected) => {
    expect(storePlan(status, withoutEffects, storeIf)).toBe(expected);
  });
});

describe('lateAnswerStorable (an answer that settled after an outer timeout)', () => {
  it.each<[string, boolean, boolean, boolean, boolean]>([
    ['a value, rendered by Nest', false, false, false, true],
    ['a failure', true, false, false, false],
    // Written by the handler (@Res()), or its status and headers set on the response
    // (passthrough: 202, Location) and overwritten by the timeout's answer.
    ['a value on a route that takes the response', false, true, false, false],
    ['a stream (a file)', false, false, true, false],
    ['a failure on a @Res() route', true, true, false, false],
  ])('%s: %s', (_name, failed, takesResponse, stream, expected) => {
    expect(lateAnswerStorable({ failed, takesResponse, stream })).toBe(expected);
  });
});
