/**
 * Node.js and Electron: the state in files (`<path>` and the key in `<path>.key`, mode 0600),
 * written atomically (a temporary file, fsync, rename). Import from `onesided-client/node`.
 */

import { open, readFile, rename, mkdir } from "node:fs/promises";
import { dirname } from "node:path";
import type { BlobName, StorageAdapter } from "./storage.js";

export class FileStorage implements StorageAdapter {
  constructor(private readonly path: string) {}

  private file(name: BlobName): string {
    return name === "state" ? this.path : `${this.path}.key`;
  }

  async read(name: BlobName): Promise<Uint8Array | null> {
    try {
      return new Uint8Array(await readFile(this.file(name)));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw e;
    }
  }

  async write(name: BlobName, data: Uint8Array): Promise<void> {
    const target = this.file(name);
    await mkdir(dirname(target), { recursive: true, mode: 0o700 });
    const temporary = `${target}.tmp-${process.pid}`;
    const handle = await open(temporary, "w", 0o600);
    try {
      await handle.writeFile(data);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temporary, target);
  }
}
