import { readOrder } from './read-order.js';

const node = (name: string, alias?: string) => ({
  name: { value: name },
  ...(alias === undefined ? {} : { alias: { value: alias } }),
});
const read = (name: string, key: string, first: boolean) => ({ name, key, first });

describe('readOrder', () => {
  it.each([
    [
      'fields in selection order',
      [node('id'), node('url'), node('thumbUrl')],
      [],
      [read('id', 'id', true), read('url', 'url', true), read('thumbUrl', 'thumbUrl', true)],
    ],
    [
      "a getter's later alias at its own key, after the field between (adversary 114)",
      [node('url', 'a'), node('thumbUrl'), node('url', 'b')],
      ['url'],
      [read('url', 'a', true), read('thumbUrl', 'thumbUrl', true), read('url', 'b', false)],
    ],
    [
      'a field read once for all its keys: at its first only',
      [node('url', 'a'), node('thumbUrl'), node('url', 'b')],
      [],
      [read('url', 'a', true), read('thumbUrl', 'thumbUrl', true)],
    ],
    [
      'a key met again (a fragment) keeps its first place',
      [node('url', 'a'), node('thumbUrl'), node('url', 'a'), node('url', 'b')],
      ['url'],
      [read('url', 'a', true), read('thumbUrl', 'thumbUrl', true), read('url', 'b', false)],
    ],
    [
      'an alias before the bare name',
      [node('url', 'big'), node('id'), node('url')],
      ['url'],
      [read('url', 'big', true), read('id', 'id', true), read('url', 'url', false)],
    ],
  ])('%s', (_case, nodes, perAlias, expected) => {
    expect(readOrder(nodes, (name) => perAlias.includes(name))).toEqual(expected);
  });
});
