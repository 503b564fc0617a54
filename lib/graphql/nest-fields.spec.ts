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

describe('fieldsOfTypes: a field renamed on any class a type has its fields from (adversary 101)', () => {
  // Interfaces, each renaming its field: `@Field({ name: 'x' }) xProp`.
  class Authored {}
  class Named {}
  class Stamped extends Named {}
  class Loop {}
  // Object types.
  class Entry {}
  class Note extends Entry {}
  class Between extends Note {}
  class Memo extends Between {}
  class Tagged {}
  class Looped {}
  const field = (schemaName: string) => ({ name: `${schemaName}Prop`, schemaName });
  const faces = new Map<unknown, ClassMetadata>([
    [
      Authored,
      {
        target: Authored,
        name: 'Authored',
        interfaces: () => [Named],
        properties: [field('author')],
      },
    ],
    [Named, { target: Named, name: 'Named', properties: [field('name')] }],
    [Stamped, { target: Stamped, name: 'Stamped', properties: [field('stamp')] }],
    [Loop, { target: Loop, name: 'Loop', interfaces: () => [Loop], properties: [field('loop')] }],
  ]);
  const objects: ClassMetadata[] = [
    // An abstract parent declares the interface; its subclass is the type.
    {
      target: Entry,
      name: 'Entry',
      isAbstract: true,
      interfaces: () => [Authored],
      properties: [field('entry')],
    },
    { target: Note, name: 'Note', properties: [field('note')] },
    // A class Nest does not know between (no decorator) adds nothing, and hides nothing.
    { target: Memo, name: 'Memo', interfaces: [Stamped], properties: [field('memo')] },
    { target: Tagged, name: 'Tagged', interfaces: Stamped, properties: [] },
    { target: Looped, name: 'Looped', interfaces: () => [Loop], properties: [] },
  ];
  const shapes: TypeMetadata = {
    getObjectTypesMetadata: () => objects,
    getObjectTypeMetadataByTarget: (target) => objects.find((item) => item.target === target),
    getInterfaceMetadataByTarget: (target) => faces.get(target),
  };
  const types = fieldsOfTypes(shapes);

  it.each([
    // Its parent class's interface.
    ['Note', 'author', 'authorProp'],
    // An interface of that interface.
    ['Note', 'name', 'nameProp'],
    ['Note', 'entry', 'entryProp'],
    ['Note', 'note', 'noteProp'],
    // Two classes up, past one Nest does not know.
    ['Memo', 'author', 'authorProp'],
    ['Memo', 'name', 'nameProp'],
    ['Memo', 'note', 'noteProp'],
    // Its own interface (a class, not a thunk), and the interface that one extends.
    ['Memo', 'stamp', 'stampProp'],
    ['Memo', 'name', 'nameProp'],
    ['Tagged', 'stamp', 'stampProp'],
    ['Tagged', 'name', 'nameProp'],
    // An interface that names itself: read once, no endless loop.
    ['Looped', 'loop', 'loopProp'],
  ])('%s.%s is read at %s', (type, schemaName, property) => {
    expect(types.get(type)?.fields.get(schemaName)?.property).toBe(property);
  });

  it.each([
    ['Tagged', 'author'],
    ['Tagged', 'note'],
    ['Looped', 'name'],
  ])('%s has no field %s from a class it does not extend or implement', (type, schemaName) => {
    expect(types.get(type)?.fields.has(schemaName)).toBe(false);
  });
});
