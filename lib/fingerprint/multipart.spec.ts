import { MAX_JSON_LIMITS } from './canonical-json.js';
import { canonicalMultipart, multipartParts, type UploadedFilePart } from './multipart.js';
import { UnkeptUploadError } from './unseen-body.js';

const file = (overrides: Partial<UploadedFilePart> = {}): UploadedFilePart => ({
  field: 'file',
  filename: 'a.txt',
  mimetype: 'text/plain',
  content: Buffer.from('first file'),
  ...overrides,
});
const canonical = (fields: Record<string, unknown>, files: UploadedFilePart[]) =>
  canonicalMultipart({ fields, files }, MAX_JSON_LIMITS);

describe('canonicalMultipart', () => {
  const base = canonical({ note: 'n' }, [file()]);

  it.each<[string, Record<string, unknown>, UploadedFilePart[]]>([
    [
      'other bytes of the same length',
      { note: 'n' },
      [file({ content: Buffer.from('other file') })],
    ],
    ['another file name', { note: 'n' }, [file({ filename: 'b.txt' })]],
    ['another media type', { note: 'n' }, [file({ mimetype: 'application/octet-stream' })]],
    ['another field name', { note: 'n' }, [file({ field: 'upload' })]],
    ['another text field', { note: 'm' }, [file()]],
    ['a file more', { note: 'n' }, [file(), file()]],
    ['no file', { note: 'n' }, []],
    ['the file name dropped by the parser', { note: 'n' }, [file({ filename: null })]],
  ])('tells apart %s', (_name, fields, files) => {
    expect(canonical(fields, files)).not.toBe(base);
  });

  it('sorts files by field, keeping the order of one field’s files', () => {
    const a1 = file({ field: 'a', content: Buffer.from('1') });
    const a2 = file({ field: 'a', content: Buffer.from('2') });
    const b = file({ field: 'b' });
    expect(canonical({}, [b, a1, a2])).toBe(canonical({}, [a1, b, a2]));
    expect(canonical({}, [a1, a2, b])).not.toBe(canonical({}, [a2, a1, b]));
  });

  it('sorts text fields by name, keeping a repeated name’s values in order', () => {
    expect(canonical({ a: '1', b: '2' }, [])).toBe(canonical({ b: '2', a: '1' }, []));
    expect(canonical({ a: ['1', '2'] }, [])).not.toBe(canonical({ a: ['2', '1'] }, []));
  });

  it('hashes the bytes: a file is its SHA-256, not its content', () => {
    const text = canonical({}, [file({ content: Buffer.alloc(1 << 20, 1) })]);
    expect(text.length).toBeLessThan(300);
    expect(text.startsWith('\0multipart\0')).toBe(true);
  });
});

describe('multipartParts', () => {
  const bytes = Buffer.from('first file');
  const multer = { fieldname: 'file', originalname: 'a.txt', mimetype: 'text/plain' };

  it.each<[string, { body?: unknown; file?: unknown; files?: unknown }, unknown]>([
    ['nothing parsed', {}, undefined],
    [
      'nothing parsed, methods decorated (@fastify/multipart)',
      { file: () => 1, files: () => 1 },
      undefined,
    ],
    [
      'multer, one file (FileInterceptor)',
      { body: { note: 'n' }, file: { ...multer, buffer: bytes } },
      { fields: { note: 'n' }, files: [file()] },
    ],
    [
      'multer, a list (FilesInterceptor)',
      { body: {}, files: [{ ...multer, buffer: bytes }] },
      { fields: {}, files: [file()] },
    ],
    [
      'multer, lists by field (FileFieldsInterceptor)',
      { body: {}, files: { file: [{ ...multer, buffer: bytes }] } },
      { fields: {}, files: [file()] },
    ],
    [
      'multer, no file (NoFilesInterceptor), a repeated field',
      { body: { a: ['1', '2'] } },
      { fields: { a: ['1', '2'] }, files: [] },
    ],
    [
      '@fastify/multipart, attachFieldsToBody: true',
      {
        body: {
          note: { type: 'field', fieldname: 'note', value: 'n' },
          file: { ...multer, type: 'file', filename: 'a.txt', _buf: bytes },
        },
        file: () => 1,
      },
      { fields: { note: 'n' }, files: [file()] },
    ],
    [
      '@fastify/multipart, a repeated field',
      {
        body: {
          a: [
            { type: 'field', fieldname: 'a', value: '1' },
            { type: 'field', fieldname: 'a', value: '2' },
          ],
        },
      },
      { fields: { a: ['1', '2'] }, files: [] },
    ],
    [
      "@fastify/multipart, attachFieldsToBody: 'keyValues' (names dropped)",
      { body: { note: 'n', file: bytes } },
      { fields: { note: 'n' }, files: [file({ filename: null, mimetype: null })] },
    ],
  ])('%s', (_name, request, expected) => {
    expect(multipartParts(request)).toEqual(expected);
  });

  it.each([
    ['multer’s disk storage', { body: {}, file: { ...multer, path: '/tmp/upload' } }],
    [
      "@fastify/multipart's onFile",
      { body: { file: { ...multer, type: 'file', filename: 'a.txt', _buf: null } } },
    ],
  ])('refuses a file whose bytes were not kept: %s', (_name, request) => {
    expect(() => multipartParts(request)).toThrow(UnkeptUploadError);
    expect(() => multipartParts(request)).toThrow(
      'The file uploaded in field "file" was not kept in memory',
    );
  });
});
