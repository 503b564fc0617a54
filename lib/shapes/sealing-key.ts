/** A key for the stored responses: an id (kept with each sealed row) and 32 bytes. */
export interface SealingKey {
  id: string;
  key: Buffer;
}
