import { mayAnswerOtherwise, seenThrough } from './first-answer-view.js';

const order = { id: 1 };
const orderView = new Proxy(order, {});
const line = { id: 2 };
const unseen = { id: 3 };
const lines = [line];
const linesView = new Proxy(lines, {});
const views = new WeakMap<object, object>([
  [order, orderView],
  [lines, linesView],
]);
const method = () => 1;

describe('seenThrough: what a read through a first answer Proxy gives', () => {
  it.each<[string, unknown, unknown]>([
    ['an object the walk proxied: its Proxy (a line order)', order, orderView],
    ['a list the walk proxied: its Proxy', lines, linesView],
    ['an object proxied nowhere: itself', unseen, unseen],
    ['a leaf: itself', 'x', 'x'],
    ['a number: itself', 4, 4],
    ['null', null, null],
    ['undefined', undefined, undefined],
    ['a function: itself (a method is bound to the value elsewhere)', method, method],
  ])('%s', (_name, value, seen) => {
    expect(seenThrough(value, views)).toBe(seen);
  });
  it('the Proxy itself read again: itself', () => {
    expect(seenThrough(orderView, views)).toBe(orderView);
  });
});

describe('mayAnswerOtherwise: whether a Proxy may give another value than its target holds', () => {
  it.each<[string, PropertyDescriptor | undefined, boolean]>([
    ['no own property on the target', undefined, true],
    ['data, configurable and writable', { value: 1, configurable: true, writable: true }, true],
    ['data, configurable, read-only', { value: 1, configurable: true, writable: false }, true],
    ['data, non-configurable, writable', { value: 1, configurable: false, writable: true }, true],
    ['data, frozen (non-configurable, read-only)', { value: 1, configurable: false }, false],
    ['an accessor, non-configurable', { get: () => 1, configurable: false }, true],
  ])('%s', (_name, own, may) => {
    expect(mayAnswerOtherwise(own)).toBe(may);
  });
});
