/** A response as it went out to the client, kept byte for byte to be sent again on replay. */
export interface StoredResponse {
  status: number;
  /** Lower-case header names (`content-type`, `location`) to their values. */
  headers: Record<string, string>;
  body: Buffer;
}
