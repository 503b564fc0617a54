import { completedPhase, derivedKey, recordablePhaseName } from './phases.js';

describe('completedPhase', () => {
  const results = { order_created: { paymentId: 7 }, psp_authorized: null };
  it.each<[string, Record<string, unknown>, ReturnType<typeof completedPhase>]>([
    ['order_created', results, { completed: true, result: { paymentId: 7 } }],
    ['psp_authorized', results, { completed: true, result: null }],
    ['finish', results, { completed: false }],
    ['order_created', {}, { completed: false }],
    ['toString', {}, { completed: false }],
    ['__proto__', {}, { completed: false }],
  ])('phase %s', (phase, stored, expected) => {
    expect(completedPhase(stored, phase)).toEqual(expected);
  });
});

describe('derivedKey', () => {
  it.each([
    ['0b8e-claim', 'psp_authorized', '0b8e-claim:psp_authorized'],
    ['0b8e-claim', 'capture', '0b8e-claim:capture'],
    ['another-claim', 'psp_authorized', 'another-claim:psp_authorized'],
  ])('claim %s, phase %s -> %s', (claimId, phase, expected) => {
    expect(derivedKey({ claimId }, phase)).toBe(expected);
  });
});

describe('recordablePhaseName', () => {
  it.each<[string, string, boolean]>([
    ['a plain name', 'reserve:mug-c', true],
    ['a whole emoji', 'reserve:mug-🍰', true],
    ['a label cut inside an emoji', `reserve:${'mug-🍰'.slice(0, 5)}`, false],
    ['a lone low surrogate', 'reserve:\udf70', false],
    ['a NUL', 'reserve:mug\u0000c', false],
    ['empty', '', true],
  ])('%s: %s', (_name, phase, recordable) => {
    expect(recordablePhaseName(phase)).toBe(recordable);
  });
});
