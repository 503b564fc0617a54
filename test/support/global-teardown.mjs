export default async function globalTeardown() {
  await globalThis.__embeddedDatabase?.stop();
}
