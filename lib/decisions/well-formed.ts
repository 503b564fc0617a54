/**
 * Whether a string is well-formed Unicode: no UTF-16 surrogate without its other half. A lone
 * surrogate is no character, so it has no UTF-8 form: PostgreSQL's driver writes it as U+FFFD,
 * where two ids that differ in JavaScript (`"acme\ud800"`, `"acme\udbff"`) become one. Any
 * text the library compares in memory and then stores (a tenant id, a key, a message id) must
 * pass this first, so that the batcher, the cache and the table agree on what is one id.
 */
export function isWellFormedText(text: string): boolean {
  // ES2024 (Node.js 20), typed here while the compiler's lib is ES2022.
  return (text as string & { isWellFormed(): boolean }).isWellFormed();
}
