import { classNaming } from './node-classes.js';

class Known {}
class Twin {}

/** class-transformer's lookups, as stand-ins: `Known` one of its name, `Twin` one of two. */
const known = (value: object) =>
  value instanceof Known ? Known : value instanceof Twin ? Twin : undefined;
const named = (name: string) => (name === 'Known' ? Known : undefined);

describe('classNaming: how a node of the shared graph is named on a replay', () => {
  it.each<[string, object, ReturnType<typeof classNaming>]>([
    ['an object of a class it knows', new Known(), { name: 'Known', twin: false }],
    ['an object of a class whose name another has', new Twin(), { name: 'Twin', twin: true }],
    ['a plain object', {}, undefined],
    ['an array (a list, walked into)', [], undefined],
  ])('%s', (_name, value, naming) => {
    expect(classNaming(value, known, named)).toEqual(naming);
  });
});
