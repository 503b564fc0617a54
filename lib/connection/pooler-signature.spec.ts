import {
  adaptedToPooler,
  effectivePooler,
  noneBehindPooler,
  poolerSignature,
  probesForPooler,
} from './pooler-signature.js';

describe('poolerSignature', () => {
  it.each([
    ['PostgreSQL itself (or a TCP proxy)', 4242, 4242, 'direct'],
    ["a pooler's own key (PgBouncer: random)", 823485730, 12115, 'pooler'],
    ['a negative random key', -1521751379, 12122, 'pooler'],
    ['a driver that kept no id', undefined, 12122, 'pooler'],
  ] as const)('%s: %s announced, %s served -> %s', (_, announced, backend, verdict) => {
    expect(poolerSignature({ announced, backend })).toBe(verdict);
  });
});

describe('effectivePooler', () => {
  it.each([
    [undefined, undefined, 'transaction'],
    [undefined, 'direct', 'none'],
    [undefined, 'pooler', 'transaction'],
    ['none', undefined, 'none'],
    ['none', 'direct', 'none'],
    ['none', 'pooler', 'transaction'],
    ['session', undefined, 'session'],
    ['session', 'pooler', 'session'],
    ['transaction', 'direct', 'transaction'],
    ['transaction', undefined, 'transaction'],
  ] as const)('set %s, seen %s -> %s', (configured, seen, mode) => {
    expect(effectivePooler(configured, seen)).toBe(mode);
  });
});

describe('probesForPooler', () => {
  it.each([
    [undefined, true],
    ['none', true],
    ['session', false],
    ['transaction', false],
  ] as const)('%s -> %s', (configured, probes) => {
    expect(probesForPooler(configured)).toBe(probes);
  });
});

describe('the words', () => {
  it('say what was seen and which setting to use', () => {
    const ids = { announced: 823485730, backend: 12115 };
    expect(adaptedToPooler(ids)).toMatch(
      /^the database connection goes through a connection pooler \(it was announced as process 823485730 and is served by 12115: .* Set pooler: 'transaction' .* pooler: 'session'/,
    );
    expect(noneBehindPooler(ids)).toMatch(
      /^pooler: 'none' says the app connects to PostgreSQL directly, .* Set pooler: 'transaction' .* leave pooler unset/,
    );
  });
});
