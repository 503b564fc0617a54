import { Injectable, type OnModuleInit } from '@nestjs/common';
import { sqlReaderReady } from './sql-parse.js';

/**
 * Start-up waits for PostgreSQL's parser (WebAssembly, loaded as the library is imported, in
 * some tens of milliseconds): every statement a handler sends in an idempotent request is read
 * with it, and none may come before it can read.
 */
@Injectable()
export class SqlReaderLoader implements OnModuleInit {
  onModuleInit(): Promise<void> {
    return sqlReaderReady();
  }
}
