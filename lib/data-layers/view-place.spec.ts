import { placeOfView, type ScopeOfUse, type ViewPlace } from './view-place.js';

describe('placeOfView: where a kept view of a request’s runner runs a statement (adversary 88)', () => {
  it.each<[string, ScopeOfUse, boolean, ViewPlace]>([
    ['its own request, open', 'home', false, 'home'],
    ['its own request’s left work, past its end', 'home', true, 'home'],
    ['no scope, its request open: code of no request', 'none', false, 'apart'],
    ['no scope, its request ended: work it left running', 'none', true, 'home'],
    ['a later request’s scope, its own ended', 'joins', true, 'join'],
    ['a concurrent request’s scope, its own open', 'joins', false, 'join'],
    ['another request’s left work, that one ended', 'ended-request', false, 'after-its-end'],
    ['outside(): joins nothing', 'apart', false, 'apart'],
    ['outside() after its request ended', 'apart', true, 'apart'],
  ])('%s', (_name, scope, homeEnded, expected) => {
    expect(placeOfView(scope, homeEnded)).toBe(expected);
  });
});
