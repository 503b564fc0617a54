import { placeOfView, type ScopeOfUse, type ViewPlace } from './view-place.js';

describe('placeOfView: where a kept view of a request’s runner runs a statement (adversary 88)', () => {
  it.each<[string, ScopeOfUse, ViewPlace]>([
    ['its own request, open or past its end', 'home', 'home'],
    ['no scope: its code, its async context lost, or work it left running', 'none', 'home'],
    ['a later or concurrent request’s scope', 'joins', 'join'],
    ['another request’s left work, that one ended', 'ended-request', 'after-its-end'],
    ['outside(): joins nothing', 'apart', 'apart'],
  ])('%s', (_name, scope, expected) => {
    expect(placeOfView(scope)).toBe(expected);
  });
});
