import { dateOfEpochMs, epochMsOf } from './epoch-ms.js';

describe('dateOfEpochMs', () => {
  it.each<[string, string | number | null | undefined, number | null]>([
    ['a numeric text', '1796629621000', 1796629621000],
    ['a number (an app parser of numeric)', 1796629621000, 1796629621000],
    ['before 1970', '-86400000', -86400000],
    ['the epoch', '0', 0],
    ['NULL', null, null],
    ['no column', undefined, null],
    ['infinity (no bound)', 'Infinity', null],
    ['-infinity (no bound)', '-Infinity', null],
    ['NaN', 'NaN', null],
    ['a style-dependent text (never made by epochMsOf)', '07.12.2026 07:27:01 UTC', null],
  ])('%s', (_, value, ms) => {
    expect(dateOfEpochMs(value)?.getTime() ?? null).toBe(ms);
  });
});

describe('epochMsOf', () => {
  it('floors to milliseconds, as an int8, infinite times NULL', () => {
    expect(epochMsOf('now()')).toBe(
      "floor(extract(epoch FROM nullif(nullif(now(), 'infinity'), '-infinity')) * 1000)::int8",
    );
  });
});
