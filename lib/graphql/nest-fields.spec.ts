import { type ClassMetadata, fieldsOfTypes, type TypeMetadata } from './nest-fields.js';

class Node {}
class Base {}
class Voucher extends Base {}
class Draft {}

const metadata: ClassMetadata[] = [
  {
    target: Base,
    name: 'Base',
    properties: [{ name: 'createdOn', schemaName: 'created', options: {} }],
  },
  {
    target: Voucher,
    name: 'Voucher',
    interfaces: () => [Node],
    properties: [
      { name: 'display', schemaName: 'label', options: {} },
      { name: 'currency', schemaName: 'currency', options: { defaultValue: 'EUR' } },
      { name: 'id', schemaName: 'id', options: {} },
      // Behind field middleware: the app's code answers it (adversary 74).
      { name: 'email', schemaName: 'email', options: {}, middleware: [() => '***'] },
    ],
  },
  { target: Draft, name: 'Draft', isAbstract: true, properties: [] },
];
const interfaces = new Map<unknown, ClassMetadata>([
  [Node, { target: Node, name: 'Node', properties: [{ name: 'uid', schemaName: 'id' }] }],
]);
const storage: TypeMetadata = {
  getObjectTypesMetadata: () => metadata,
  getObjectTypeMetadataByTarget: (target) => metadata.find((item) => item.target === target),
  getInterfaceMetadataByTarget: (target) => interfaces.get(target),
};

describe('fieldsOfTypes: how Nest reads each field of a code-first type', () => {
  const types = fieldsOfTypes(storage);

  it.each([
    ['Voucher', 'label', { property: 'display' }],
    ['Voucher', 'currency', { property: 'currency', fallback: { value: 'EUR' } }],
    // Its own field wins over its interface's of the same schema name, as Nest builds it.
    ['Voucher', 'id', { property: 'id' }],
    // A parent class's field is the type's too.
    ['Voucher', 'created', { property: 'createdOn' }],
    ['Base', 'created', { property: 'createdOn' }],
    ['Voucher', 'email', { property: 'email', middleware: true }],
  ])('%s.%s is read as %j', (type, field, expected) => {
    expect(types.get(type)?.fields.get(field)).toEqual(expected);
  });

  it('leaves abstract classes out (no type of the schema has their name)', () => {
    expect(types.has('Draft')).toBe(false);
  });
});
